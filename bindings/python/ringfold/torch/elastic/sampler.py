"""Horovod's ElasticSampler (horovod/torch/elastic/sampler.py) over ringfold.

Contract (Horovod's)
  * ElasticSampler(dataset, shuffle=True, seed=0): a torch Sampler that partitions the dataset's
    indices over the ranks like DistributedSampler (rank r takes every size-th index from r,
    the list padded with its first indices to a multiple of the size, cyclically when fewer
    remain than are missing -- Horovod fails an assertion then), and repartitions the
    indices not yet processed this epoch when the membership changes.
  * record_batch(batch_idx, batch_size) counts batch_size * size samples as processed (every
    rank processed one batch); set_epoch(epoch), called at the END of an epoch, clears the count
    and reshuffles (seed + epoch, the same order on every rank).
  * state_dict() = {'epoch', 'processed_num'}; load_state_dict() sets them and repartitions.
    TorchState saves, restores and syncs a sampler it holds through these.
  * reset() re-reads rank and size (ringfold.torch.rank()/size()): TorchState calls it through
    load_state_dict after every reset.
"""
import math
import random

import torch.utils.data

from ringfold.basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Sampler that partitions the dataset across ranks and repartitions after reset events.

    Args:
        dataset: dataset used for sampling (assumed to be of constant size).
        shuffle: if True (default), shuffle the indices.
        seed: random seed used to shuffle when shuffle=True; identical on every rank (default 0).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed

        self.epoch = 0
        self.processed_indices = set()

        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.processed_num = 0

        self.reset()

    def set_epoch(self, epoch):
        """Sets the epoch (call it at the end of each epoch): clears the processed count and
        reshuffles for the next one."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank processed one batch of batch_size samples."""
        self.processed_num += batch_size * self.num_replicas

    def load_state_dict(self, state_dict):
        self.epoch = state_dict['epoch']
        self.processed_num = state_dict['processed_num']
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def reset(self):
        self.num_replicas = size()
        self.rank = rank()

        # Exclude the samples already processed this epoch.
        all_indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(all_indices)
        self.remaining_indices = all_indices[self.processed_num:]

        self.num_samples = int(math.ceil(len(self.remaining_indices) * 1.0 / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        self.indices = self.remaining_indices[:]
        # Pad to a multiple of the number of ranks with the first indices (again, when fewer
        # remain than are missing: ringfold; Horovod's assertion fails then).
        while self.indices and len(self.indices) < self.total_size:
            self.indices += self.indices[:(self.total_size - len(self.indices))]
        assert len(self.indices) == self.total_size
        self.indices = self.indices[self.rank:self.total_size:self.num_replicas]
        assert len(self.indices) == self.num_samples
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
