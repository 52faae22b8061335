"""The handle of Horovod's sparse allreduce (mpi_ops.sparse_allreduce_async).

Contract
  * SparseAllreduceHandle is what sparse_allreduce_async returns: as in Horovod, calling it
    waits for the allgathers of indices and values (both, even when one fails) and returns the
    coalesced sparse sum, divided by the set size for Average (integer values: truncated).
    Calling it again returns the same tensor; poll() says whether calling it would block.
"""
import torch

from ringfold import _ops


class SparseAllreduceHandle:
    def __init__(self, tensor, indices, values, average, process_set, synchronize):
        self._tensor = tensor
        self._handles = (indices, values)
        self._average = average
        self._process_set = process_set
        self._synchronize = synchronize
        self._result = None

    def poll(self):
        return self._result is not None or all(_ops.poll(h) for h in self._handles)

    def __call__(self):
        if self._result is None:
            indices_handle, values_handle = self._handles
            try:
                values = self._synchronize(values_handle)
            finally:
                indices = self._synchronize(indices_handle)
            if self._average:
                n = self._process_set.size()
                values = values / n if values.is_floating_point() else values.div(n, rounding_mode='trunc')
            self._result = torch.sparse_coo_tensor(indices.t(), values, self._tensor.shape,
                                                   check_invariants=True).coalesce()
        return self._result
