#!/usr/bin/env python3
"""Data-parallel training of a small MLP on scikit-learn's bundled digits, Horovod style.

A Horovod PyTorch script runs on ringfold by changing one import: `import horovod.torch as hvd`
becomes `import ringfold.torch as hvd`. Everything below is the seeds' usual pattern:
DistributedSampler, learning rate scaled by the number of ranks, fp16 gradient compression,
broadcast of the initial parameters and optimizer state, per-epoch metrics averaged over the
ranks with hvd.allreduce, checkpoints written by rank 0 only.

    python examples/pytorch_train.py                          # one process (size 1)
    ringfoldrun -np 4 python examples/pytorch_train.py        # 4 ranks
    torchrun --nproc_per_node 2 examples/pytorch_train.py     # torchrun's environment works too

The dataset (1797 8x8 images, 10 classes) ships with scikit-learn: no download. Checkpoints go
to --checkpoint-dir (default: a fresh temporary directory, printed at the end; nothing is
written into the repository). The last line on rank 0 is machine-checkable:

    final test accuracy: 0.9xxx
"""
import argparse
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import ringfold.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--epochs', type=int, default=15)
    p.add_argument('--batch-size', type=int, default=32, help='per rank')
    p.add_argument('--lr', type=float, default=0.001, help='per rank; scaled by hvd.size()')
    p.add_argument('--seed', type=int, default=42)
    p.add_argument('--checkpoint-dir', default=None,
                   help='where rank 0 writes checkpoint-<epoch>.pt (default: a new temporary directory)')
    p.add_argument('--threads', type=int, default=int(os.environ.get('RINGFOLD_EXAMPLE_THREADS', '1')),
                   help='torch threads per rank (default 1: ranks share the machine\'s cores)')
    p.add_argument('--no-fp16', action='store_true', help='send gradients uncompressed')
    return p.parse_args()


class Net(nn.Module):
    """64 -> 128 -> 64 -> 10 MLP (17.1 k parameters)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def load_data(seed):
    """The same standardized, fixed train/test split on every rank."""
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data.astype(np.float32), digits.target.astype(np.int64),
        test_size=0.25, random_state=seed, stratify=digits.target)
    scaler = StandardScaler().fit(x_train)
    x_train = scaler.transform(x_train).astype(np.float32)
    x_test = scaler.transform(x_test).astype(np.float32)
    return (TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train)),
            TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test)))


def metric_average(value, name):
    """The mean over ranks of a per-rank scalar."""
    return hvd.allreduce(torch.tensor(value, dtype=torch.float64), name=name).item()


def evaluate(model, loader, device):
    """(mean loss, accuracy) over this rank's shard, averaged over ranks weighted by count."""
    model.eval()
    loss_sum = correct = count = 0.0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss_sum += F.cross_entropy(out, y, reduction='sum').item()
            correct += (out.argmax(1) == y).sum().item()
            count += len(y)
    # Sum over ranks (not Average): the shards may differ in size by one sample.
    totals = hvd.allreduce(torch.tensor([loss_sum, correct, count], dtype=torch.float64),
                           name='eval_totals', op=hvd.Sum)
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


def main():
    args = parse_args()
    t_start = time.time()
    hvd.init()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device('cuda', hvd.local_rank())
    else:
        device = torch.device('cpu')
    verbose = hvd.rank() == 0

    train_ds, test_ds = load_data(args.seed)
    train_sampler = DistributedSampler(train_ds, num_replicas=hvd.size(), rank=hvd.rank(),
                                       shuffle=True, seed=args.seed)
    # The test shard: every sample counted exactly once over all ranks (a DistributedSampler
    # would pad the last shard with repeated samples).
    test_indices = list(range(hvd.rank(), len(test_ds), hvd.size()))
    train_loader = DataLoader(train_ds, batch_size=args.batch_size, sampler=train_sampler)
    test_loader = DataLoader(torch.utils.data.Subset(test_ds, test_indices), batch_size=256)

    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size())
    compression = hvd.Compression.none if args.no_fp16 else hvd.Compression.fp16
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    checkpoint_dir = None
    if verbose:
        checkpoint_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix='ringfold-digits-')
        os.makedirs(checkpoint_dir, exist_ok=True)
        print('ranks %d, train %d, test %d samples, %d parameters, lr %.4g, fp16 %s'
              % (hvd.size(), len(train_ds), len(test_ds), sum(p.numel() for p in model.parameters()),
                 args.lr * hvd.size(), not args.no_fp16), flush=True)

    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        loss_sum = batches = 0
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            batches += 1
        train_loss = metric_average(loss_sum / max(batches, 1), 'train_loss')
        test_loss, test_acc = evaluate(model, test_loader, device)
        if verbose:
            print('epoch %2d  train loss %.4f  test loss %.4f  test accuracy %.4f'
                  % (epoch, train_loss, test_loss, test_acc), flush=True)
            torch.save({'epoch': epoch, 'model': model.state_dict(),
                        'optimizer': optimizer.state_dict()},
                       os.path.join(checkpoint_dir, 'checkpoint-%d.pt' % epoch))

    if verbose:
        print('checkpoints in %s; %.1f s' % (checkpoint_dir, time.time() - t_start), flush=True)
        print('final test accuracy: %.4f' % test_acc, flush=True)


if __name__ == '__main__':
    main()
