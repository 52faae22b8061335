"""One rank of the fault matrix (tests/faults/matrix.py): runs one collective in a loop and checks
every result bit for bit against a reference it computes itself.

Contract. Started by ringfoldrun, by hand (RINGFOLD_* variables) or under ip netns exec, it calls
init(), then runs FM_OP (allreduce | allgather | broadcast | alltoall) on int32 data whose result
is exact (sums of small integers), FM_STEPS times (0: until killed), and shuts down. The result
is FM_BYTES bytes (allgather and alltoall: each rank sends FM_BYTES / size). Every step's result is
compared with the reference; a difference is counted in bits (popcount of the XOR). With
FM_API=torch it trains as well: ringfold.torch's DistributedOptimizer on a small linear model,
one step per iteration, and the collective runs on torch tensors through ringfold.torch. FM_SLEEP=S
sleeps S seconds after each step (so that a run outlasts a fault). With
FM_SPAM=N it prints N bytes of filler to stdout each step (the blocked-pipe cell). Lines the
driver reads, on stdout, flushed (t = time.time()):

    FM START <rank> <pid>                  first thing (before importing the framework)
    FM INIT <rank> <t>                     about to call init() (the framework is imported)
    FM READY <rank> <pid> <t> <store port> init() returned
    FM STEADY <rank> <t>                   after FM_STEADY steps (default 3)
    FM ERROR <rank> <t> <Type>: <text>     a call raised; the process then exits 1
    FM DONE <rank> <t> <steps> <wrong_bits> <wrong_steps>   every step ran; exits 0 (after shutdown)

wrong_bits must be 0. Nothing here waits without a bound: every wait is inside ringfold, which
must end it within RINGFOLD_TIMEOUT.
"""
import os
import sys
import time

import numpy as np

API = os.environ.get('FM_API', 'numpy')
OP = os.environ.get('FM_OP', 'allreduce')
NBYTES = int(os.environ.get('FM_BYTES', '65536'))
STEPS = int(os.environ.get('FM_STEPS', '10'))
STEADY = int(os.environ.get('FM_STEADY', '3'))
SPAM = int(os.environ.get('FM_SPAM', '0'))
SLEEP = float(os.environ.get('FM_SLEEP', '0'))


def say(*words):
    sys.stdout.write('FM ' + ' '.join(str(w) for w in words) + '\n')
    sys.stdout.flush()


def contribution(rank, step, count, offset=0):
    """Rank `rank`'s int32 data at `step`: small integers, so sums over ranks are exact."""
    i = np.arange(offset, offset + count, dtype=np.int64)
    return (((i + 7 * step) % 251) * (rank + 1) - 3 * rank).astype(np.int32)


def reference(op, rank, size, step, count):
    if op == 'allreduce':
        i = np.arange(count, dtype=np.int64)
        s = size * (size + 1) // 2
        return (((i + 7 * step) % 251) * s - 3 * (size * (size - 1) // 2)).astype(np.int32)
    if op == 'allgather':
        return np.concatenate([contribution(r, step, count) for r in range(size)])
    if op == 'broadcast':
        return contribution(step % size, step, count)
    if op == 'alltoall':  # rank r's block `rank` is elements [rank*c, (rank+1)*c) of its buffer
        c = count // size
        return np.concatenate([contribution(r, step, c, rank * c) for r in range(size)])
    raise ValueError(op)


def wrong_bits(got, want):
    got = np.ascontiguousarray(got).reshape(-1)
    if got.shape != want.shape:
        return 32 * max(got.size, want.size)
    if np.array_equal(got, want):
        return 0
    diff = np.bitwise_xor(got.view(np.uint32), want.view(np.uint32))
    diff = diff[diff != 0]
    return int(np.unpackbits(diff.view(np.uint8)).sum())


def main():
    say('START', os.environ.get('RINGFOLD_RANK', '?'), os.getpid())
    if API == 'torch':
        import torch
        import ringfold.torch as hvd
        torch.set_num_threads(1)
    else:
        import ringfold as hvd
    t_start = time.time()
    say('INIT', os.environ.get('RINGFOLD_RANK', '?'), '%.6f' % t_start)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    say('READY', rank, os.getpid(), '%.6f' % time.time(), os.environ.get('RINGFOLD_STORE_PORT', '-'),
        'init %.2fs' % (time.time() - t_start))
    elems = max(NBYTES // 4, size)
    # allgather sends elems/size per rank; alltoall a buffer of elems with one block per peer
    count = elems if OP in ('allreduce', 'broadcast') else max(elems // size, 1) * (size if OP == 'alltoall' else 1)
    if API == 'torch':
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                       named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        gen = torch.Generator().manual_seed(rank)
    bad_bits = bad_steps = 0
    step = 0
    filler = ('x' * 99 + '\n') * max(SPAM // 100, 1) if SPAM else ''
    while STEPS == 0 or step < STEPS:
        x = contribution(rank, step, count)
        name = 'fm.%d' % step
        if API == 'torch':
            loss = model(torch.randn(8, 16, generator=gen)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            t = torch.from_numpy(x)
            if OP == 'allreduce':
                got = hvd.allreduce(t, op=hvd.Sum, name=name).numpy()
            elif OP == 'allgather':
                got = hvd.allgather(t, name=name).numpy()
            elif OP == 'broadcast':
                got = hvd.broadcast(t, root_rank=step % size, name=name).numpy()
            else:
                got = hvd.alltoall(t, name=name).numpy()
        else:
            if OP == 'allreduce':
                got = hvd.allreduce(x, op=hvd.Sum, name=name)
            elif OP == 'allgather':
                got = hvd.allgather(x, name=name)
            elif OP == 'broadcast':
                got = hvd.broadcast(x, root_rank=step % size, name=name)
            else:
                got = hvd.alltoall(x, name=name)
        bits = wrong_bits(got, reference(OP, rank, size, step, count))
        if bits:
            bad_bits += bits
            bad_steps += 1
            say('WRONG', rank, step, bits)
        step += 1
        if step == STEADY:
            say('STEADY', rank, '%.6f' % time.time())
        if SLEEP:
            time.sleep(SLEEP)
        if SPAM:
            sys.stdout.write(filler)
            sys.stdout.flush()
    hvd.shutdown()
    say('DONE', rank, '%.6f' % time.time(), step, bad_bits, bad_steps)


if __name__ == '__main__':
    try:
        main()
    except Exception as e:  # noqa: BLE001 - every error is what the matrix records
        text = ' '.join(str(e).split())
        say('ERROR', os.environ.get('RINGFOLD_RANK', '?'), '%.6f' % time.time(),
            '%s: %s' % (type(e).__name__, text))
        sys.exit(1)
