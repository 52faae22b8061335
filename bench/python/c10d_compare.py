#!/usr/bin/env python3
"""torch.distributed with backend="ringfold" against backend="gloo", side by side.

Issue 20's targets: DistributedDataParallel's step time with backend "ringfold" at most 0.8x
that with "gloo" (the 10.5 M-parameter MLP of ddp_compare.py and a small CNN, 2 and 4 ranks),
and the per-call cost of dist.all_reduce against ringfold.torch's hvd.allreduce at 4 bytes and
64 MiB. One command runs everything and prints a markdown report:

    python bench/python/c10d_compare.py --np 2 4 --repeats 3

DDP part: for every rank count, repeat and model it launches, interleaved (the order reversed
every other repeat, so drift in the machine's load hits both alike), N processes with plain
env:// variables (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT; no launcher,
so no CPU binding for either), each running the same DDP script, once with
init_process_group("ringfold") and once with "gloo". DDP keeps its defaults (25 MiB buckets).
Step time is rank 0's median over --steps timed steps after --warmup (zero_grad, forward,
backward with DDP's bucketed allreduces, SGD step); the table gives the median over repeats.
--local adds the floor: the same N processes training the bare model, with no communication
(the compute time under the same contention, which no backend can beat).

Models (fixed synthetic data, the same batch every step, seeded per rank; SGD, lr 0.01):
  mlp10m   1024 -> 2048 -> 2048 -> 2048 -> 10 (10.5 M parameters), batch 32 per rank
  cnn      conv 3->32, pool, conv 32->64, pool, 4096 -> 256 -> 10 on 32x32x3 (1.07 M), batch 32

Per-call part (--calls): one job of N ranks (init_process_group("ringfold"), which also starts
the engine ringfold.torch uses) times, in interleaved blocks, synchronous calls of
  dist.all_reduce(t)                 on the ringfold world group
  dist.all_reduce(t, group=gloo)     on a gloo group of the same ranks
  hvd.allreduce_(t, name='lat')      ringfold.torch (named: the engine's response cache hits)
  hvd.allreduce_(t)                  ringfold.torch, unnamed (as c10d's calls: no cache hit)
  dist.reduce(t, dst=0)              on each group (ringfold: the engine's reduce, a chain to
                                     the root that carries the tensor once per link)
for a 4-byte and a 64 MiB float32 tensor, and reports per-call medians (rank 0).

Each rank uses --threads torch threads (default 1: the ranks share the cores). ringfold's package
and library come from the environment (PYTHONPATH, RINGFOLD_LIBRARY), as for any program.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def build_model(name):
    import torch.nn as nn
    if name == 'mlp10m':
        dims = [1024, 2048, 2048, 2048, 10]
        layers = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers), (1024,)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10)), (3, 32, 32)


# ---- workers --------------------------------------------------------------------------------

def ddp_worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    model, shape = build_model(args.model)
    if args.backend == 'local':              # the floor: no communication at all
        rank, barrier, net = int(os.environ['RANK']), (lambda: None), model
    else:
        if args.backend == 'ringfold':
            import ringfold.torch.distributed  # noqa: F401  (registers the backend)
        dist.init_process_group(args.backend)
        rank, barrier, net = dist.get_rank(), dist.barrier, DDP(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn((args.batch_size,) + shape, generator=g)
    y = torch.randint(0, 10, (args.batch_size,), generator=g)

    def step():
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    barrier()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    barrier()
    if rank == 0:
        print('RESULT ' + json.dumps({'median_ms': statistics.median(times) * 1e3,
                                      'params': sum(p.numel() for p in model.parameters())}), flush=True)
    if args.backend != 'local':
        dist.destroy_process_group()


def calls_worker(args):
    import torch
    import torch.distributed as dist
    import ringfold.torch as hvd
    import ringfold.torch.distributed  # noqa: F401
    torch.set_num_threads(args.threads)
    dist.init_process_group('ringfold')
    gloo = dist.new_group(backend='gloo')
    rank = dist.get_rank()
    kinds = {
        'dist.all_reduce (ringfold)': lambda t: dist.all_reduce(t),
        'dist.all_reduce (gloo)': lambda t: dist.all_reduce(t, group=gloo),
        'hvd.allreduce_ (named)': lambda t: hvd.allreduce_(t, name='lat', op=hvd.Sum),
        'hvd.allreduce_ (unnamed)': lambda t: hvd.allreduce_(t, op=hvd.Sum),
        'dist.reduce (ringfold)': lambda t: dist.reduce(t, dst=0),
        'dist.reduce (gloo)': lambda t: dist.reduce(t, dst=0, group=gloo),
    }
    result = {}
    for label, numel, calls, blocks in (('4 B', 1, args.calls, 5), ('64 MiB', 16 << 20, 3, 3)):
        t = torch.ones(numel)
        per = {k: [] for k in kinds}
        for block in range(blocks):
            order = list(kinds) if block % 2 == 0 else list(reversed(list(kinds)))
            for k in order:
                fn = kinds[k]
                fn(t)                                   # warm-up of this block
                dist.barrier(group=gloo)
                for _ in range(calls):
                    t0 = time.perf_counter()
                    fn(t)
                    per[k].append(time.perf_counter() - t0)
        result[label] = {k: statistics.median(v) * 1e6 for k, v in per.items()}
    if rank == 0:
        print('RESULT ' + json.dumps(result), flush=True)
    dist.destroy_process_group()


# ---- driver ---------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def spawn(args, np, extra):
    """np ranks of this script with plain env:// variables; rank 0's RESULT."""
    port = free_port()
    procs = []
    for r in range(np):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(np),
                   LOCAL_WORLD_SIZE=str(np), MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port),
                   OMP_NUM_THREADS=str(args.threads))
        cmd = [sys.executable, os.path.abspath(__file__), '--threads', str(args.threads),
               '--steps', str(args.steps), '--warmup', str(args.warmup), '--batch-size',
               str(args.batch_size), '--calls', str(args.calls)] + extra
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise RuntimeError('%s failed (%d):\n%s\n%s' % (extra, p.returncode, out[-3000:], err[-3000:]))
        outs.append(out)
    for line in outs[0].splitlines():
        if line.startswith('RESULT '):
            return json.loads(line[len('RESULT '):])
    raise RuntimeError('no RESULT from %s:\n%s' % (extra, outs[0][-3000:]))


def loadavg():
    try:
        return ' '.join(open('/proc/loadavg').read().split()[:3])
    except OSError:
        return '?'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--np', type=int, nargs='+', default=[2, 4])
    ap.add_argument('--repeats', type=int, default=3, help='DDP repeats (0: the per-call part only)')
    ap.add_argument('--models', nargs='+', default=['mlp10m', 'cnn'], choices=['mlp10m', 'cnn'])
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--warmup', type=int, default=5)
    ap.add_argument('--batch-size', type=int, default=32)
    ap.add_argument('--calls', type=int, default=300, help='4-byte calls per block (0: skip the per-call part)')
    ap.add_argument('--local', action='store_true', help='also run the no-communication floor')
    ap.add_argument('--threads', type=int, default=int(os.environ.get('RINGFOLD_BENCH_THREADS', '1')))
    ap.add_argument('--timeout', type=int, default=900)
    ap.add_argument('--worker', choices=['ddp', 'calls'], help=argparse.SUPPRESS)
    ap.add_argument('--backend', default='ringfold', help=argparse.SUPPRESS)
    ap.add_argument('--model', default='mlp10m', help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == 'ddp':
        return ddp_worker(args)
    if args.worker == 'calls':
        return calls_worker(args)

    samples, params = {}, {}
    load_start, t_start = loadavg(), time.time()
    kinds = ['ringfold', 'gloo'] + (['local'] if args.local else [])
    for np in args.np:
        for rep in range(args.repeats):
            for model in args.models:
                order = kinds if rep % 2 == 0 else list(reversed(kinds))
                for backend in order:
                    res = spawn(args, np, ['--worker', 'ddp', '--backend', backend, '--model', model])
                    samples.setdefault((np, model, backend), []).append(res['median_ms'])
                    params[model] = res['params']
                    print('<!-- np %d repeat %d %s %s: %.2f ms (load %s) -->'
                          % (np, rep + 1, model, backend, res['median_ms'], loadavg()), flush=True)
    calls = {np: spawn(args, np, ['--worker', 'calls']) for np in args.np} if args.calls else {}

    print()
    print('%d CPUs, one host, %d torch thread(s) per rank, batch %d per rank, %d timed steps after %d '
          'warm-up, %d repeats interleaved; load average %s at start, %s at end; %.0f s; torch %s'
          % (os.cpu_count(), args.threads, args.batch_size, args.steps, args.warmup, args.repeats,
             load_start, loadavg(), time.time() - t_start, _torch_version()))
    print()
    floor = ' | no comm (ms)' if args.local else ''
    if args.repeats == 0:                     # the per-call part only
        args.models = []
    print('| model | params | ranks | DDP ringfold (ms) | DDP gloo (ms) | ringfold/gloo%s '
          '| per repeat: ringfold; gloo (ms) |' % floor)
    print('|---|---|---|---:|---:|---:|%s---|' % ('---:|' if args.local else ''))
    for model in args.models:
        for np in args.np:
            ours, theirs = samples[(np, model, 'ringfold')], samples[(np, model, 'gloo')]
            local = ' | %.2f' % statistics.median(samples[(np, model, 'local')]) if args.local else ''
            print('| %s | %.2f M | %d | %.2f | %.2f | **%.2f**%s | %s; %s |' % (
                model, params[model] / 1e6, np, statistics.median(ours), statistics.median(theirs),
                statistics.median(ours) / statistics.median(theirs), local,
                ' '.join('%.1f' % v for v in ours), ' '.join('%.1f' % v for v in theirs)))
    if calls:
        print()
        kinds = list(next(iter(calls.values()))['4 B'])
        print('| ranks | size | ' + ' | '.join('%s (us)' % k for k in kinds) + ' |')
        print('|---|---|' + '---:|' * len(kinds))
        for np, res in calls.items():
            for size, per in res.items():
                print('| %d | %s | %s |' % (np, size, ' | '.join('%.1f' % per[k] for k in kinds)))


def _torch_version():
    try:
        import torch
        return torch.__version__
    except ImportError:
        return '?'


if __name__ == '__main__':
    main()
