"""SyncBatchNorm: batch normalization whose training statistics cover the whole process set.

Contract
  * A drop-in for torch.nn.BatchNorm{1,2,3}d (same constructor arguments, same state_dict
    keys), for inputs of shape (N, C, ...). In training mode, the mean and variance are those
    of the batch concatenated over every rank of the process set (one Sum-allreduce of
    per-channel count, sum and sum of squares in float64), so a batch split across ranks
    normalizes exactly like the unsplit batch. Ranks may have different batch sizes.
  * Backward allreduces the per-channel sums of dy and dy*xhat, giving the gradient of the
    global-batch normalization (as torch.nn.SyncBatchNorm does). weight/bias gradients are
    local; DistributedOptimizer averages them like every other gradient.
  * Running statistics use the unbiased global variance. In eval mode, or with one rank, it is
    plain batch norm.
"""
import torch

from ringfold.basics import Sum
from ringfold.process_sets import global_process_set
from ringfold.torch import mpi_ops


def _channel_view(t, dims):
    return t.view([1, -1] + [1] * (dims - 2))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        dims = x.dim()
        reduce_dims = [0] + list(range(2, dims))
        xd = x.double()
        local = torch.stack([torch.full((x.shape[1],), x.numel() / x.shape[1], dtype=torch.float64),
                             xd.sum(reduce_dims), (xd * xd).sum(reduce_dims)])
        total = mpi_ops.allreduce(local, op=Sum, process_set=process_set)
        count = total[0][0].item()
        if count <= 1:
            raise ValueError('SyncBatchNorm: expected more than 1 value per channel in training, got %d'
                             % count)
        mean = total[1] / count
        var = (total[2] / count - mean * mean).clamp_min(0)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            running_var.mul_(1 - momentum).add_((var * count / (count - 1)).to(running_var.dtype),
                                                alpha=momentum)
        invstd = torch.rsqrt(var + eps)
        xhat = ((xd - _channel_view(mean, dims)) * _channel_view(invstd, dims)).to(x.dtype)
        y = xhat
        if weight is not None:
            y = y * _channel_view(weight, dims) + _channel_view(bias, dims)
        ctx.save_for_backward(xhat, weight, invstd)
        ctx.count = count
        ctx.process_set = process_set
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, weight, invstd = ctx.saved_tensors
        dims = dy.dim()
        reduce_dims = [0] + list(range(2, dims))
        sum_dy = dy.double().sum(reduce_dims)
        sum_dy_xhat = (dy.double() * xhat.double()).sum(reduce_dims)
        grad_weight = grad_bias = None
        if weight is not None:
            grad_weight = sum_dy_xhat.to(weight.dtype)
            grad_bias = sum_dy.to(weight.dtype)
        total = mpi_ops.allreduce(torch.stack([sum_dy, sum_dy_xhat]), op=Sum,
                                  process_set=ctx.process_set)
        mean_dy = _channel_view(total[0] / ctx.count, dims)
        mean_dy_xhat = _channel_view(total[1] / ctx.count, dims)
        scale = _channel_view(invstd if weight is None else invstd * weight.double(), dims)
        dx = ((dy.double() - mean_dy - xhat.double() * mean_dy_xhat) * scale).to(dy.dtype)
        return dx, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set, **kwargs):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, **kwargs)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError('SyncBatchNorm: expected at least 2D input (N, C, ...), got %dD' % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or self.process_set.size() == 1:
            return super().forward(input)
        momentum = self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias,
                                            self.running_mean if self.track_running_stats else None,
                                            self.running_var if self.track_running_stats else None,
                                            self.eps, momentum if momentum is not None else 0.0,
                                            self.process_set)
