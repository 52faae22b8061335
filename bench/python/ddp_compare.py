#!/usr/bin/env python3
"""Training step time: ringfold's DistributedOptimizer vs PyTorch DDP (gloo), side by side.

Issue 4's target: ringfold with DistributedOptimizer takes at most 0.8x DDP's step time, on the
example's model and on an MLP of at least 10 M parameters, at 2 and 4 local ranks. One command
runs everything and prints a markdown table:

    python bench/python/ddp_compare.py --np 2 4 --repeats 3

For every rank count and repeat, and every model, it launches in turn (interleaved, so drift in
the machine's load hits every configuration alike):
  ringfold   `ringfoldrun -np N python ddp_compare.py --worker ringfold`: the model wrapped as
             the example does (hvd.DistributedOptimizer with named_parameters, broadcast of the
             initial parameters), gradients allreduced from per-parameter hooks during backward;
  ddp        N processes started here with torchrun's environment (RANK, WORLD_SIZE,
             MASTER_ADDR=127.0.0.1, a free MASTER_PORT): torch.distributed with gloo and
             DistributedDataParallel with its defaults (25 MiB buckets);
  ddp-bound  (--ddp-bound) DDP as above, but started by `ringfoldrun` so that its ranks get the
             same CPU binding as ringfold's (ringfoldrun's default, --bind-to auto: round robin
             when the ranks outnumber the cores); the ratio column then uses the faster of the
             two DDP figures. Only run where that binding applies (more ranks than CPUs here):
             elsewhere it would be a second sample of plain DDP, and taking the faster of two
             samples of one configuration would flatter DDP;
  local      (--local) the same N processes with no communication at all: the compute-only floor
             on this machine, with the same CPU contention.
Further ringfold configurations, with their own engine settings, are added with --config, e.g.
    --config cycle0.2:RINGFOLD_CYCLE_TIME=0.2 --config nofuse:RINGFOLD_FUSION_THRESHOLD=0

Models (fixed synthetic data, the same batch every step, seeded per rank; SGD, lr 0.01):
  digits   the example's MLP, 64 -> 128 -> 64 -> 10 (17.1 k parameters), batch 32 per rank
  mlp10m   1024 -> 2048 -> 2048 -> 2048 -> 10 (10.5 M parameters), batch 32 per rank
Each rank uses --threads torch threads (default 1; the ranks share the cores). Step time is
rank 0's median over --steps timed steps after --warmup steps (zero_grad, forward, backward,
optimizer step: the step includes waiting for the gradients in both frameworks); the table
gives the median over the repeats and the per-repeat values. --fp16 compresses gradients in
both (ringfold: Compression.fp16; DDP: the fp16_compress_hook communication hook).

Paths: --ringfoldrun (default build/ringfoldrun, else `ringfoldrun` on PATH). ringfold's package
and library come from the environment (PYTHONPATH, RINGFOLD_LIBRARY), as for any program.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

from launcher import find_launcher  # noqa: E402  (bench/python/launcher.py)
MODELS = {'digits': [64, 128, 64, 10], 'mlp10m': [1024, 2048, 2048, 2048, 10]}


# ---- worker ---------------------------------------------------------------------------------

def build_model(name):
    import torch.nn as nn
    dims = MODELS[name]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def worker(args):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    model = build_model(args.model)         # same initial weights everywhere (seeded)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    if args.worker == 'ringfold':
        import ringfold.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        compression = hvd.Compression.fp16 if args.fp16 else hvd.Compression.none
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       compression=compression)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        if os.environ.get('RINGFOLD_BENCH_TIMELINE') and rank == 0:
            pass  # RINGFOLD_TIMELINE (set by --config) already records the whole run
        barrier = hvd.barrier
        net = model
    elif args.worker == 'ddp':
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        if 'RANK' not in os.environ:  # ddp-bound: started by ringfoldrun
            os.environ['RANK'] = os.environ['RINGFOLD_RANK']
            os.environ['WORLD_SIZE'] = os.environ['RINGFOLD_SIZE']
        dist.init_process_group('gloo', init_method='env://')
        rank, size = dist.get_rank(), dist.get_world_size()
        net = DDP(model)
        if args.fp16:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            net.register_comm_hook(None, default_hooks.fp16_compress_hook)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        barrier = dist.barrier
    else:  # local: no communication
        rank, size = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
        barrier = lambda: None
        net = model

    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(args.batch_size, MODELS[args.model][0], generator=g)
    y = torch.randint(0, MODELS[args.model][-1], (args.batch_size,), generator=g)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss

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
        nparams = sum(p.numel() for p in model.parameters())
        print('RESULT ' + json.dumps({'median_ms': statistics.median(times) * 1e3, 'size': size,
                                      'params': nparams, 'times_ms': [t * 1e3 for t in times]}),
              flush=True)
    if args.worker == 'ringfold':
        hvd.shutdown()
    elif args.worker == 'ddp':
        import torch.distributed as dist
        dist.destroy_process_group()


# ---- driver ---------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def parse_result(text, what):
    m = re.search(r'^(?:\[0\]<stdout>:)?RESULT (.*)$', text, re.M)
    if not m:
        raise RuntimeError('%s: no RESULT line in:\n%s' % (what, text[-4000:]))
    return json.loads(m.group(1))


def worker_args(args, kind, model):
    a = [sys.executable, os.path.abspath(__file__), '--worker', kind, '--model', model,
         '--steps', str(args.steps), '--warmup', str(args.warmup), '--threads', str(args.threads),
         '--batch-size', str(args.batch_size)]
    return a + (['--fp16'] if args.fp16 else [])


def run_launched(args, launcher, np, model, kind, env, what):
    """`kind`'s worker on np ranks started by ringfoldrun, with `env` exported to them."""
    cmd = [launcher, '-np', str(np)]
    for k in sorted(env):
        cmd += ['-x', '%s=%s' % (k, env[k])]
    cmd += worker_args(args, kind, model)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                       env={**os.environ, **env})
    if p.returncode != 0:
        raise RuntimeError('%s failed (%d):\n%s\n%s' % (' '.join(cmd), p.returncode, p.stdout[-4000:],
                                                        p.stderr[-4000:]))
    return parse_result(p.stdout, what)


def run_ringfold(args, launcher, np, model, env):
    return run_launched(args, launcher, np, model, 'ringfold', env, 'ringfold')


def run_ddp_bound(args, launcher, np, model):
    """DDP started by ringfoldrun (bound to the cores as ringfold's ranks are)."""
    env = {'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(free_port()), 'OMP_NUM_THREADS': str(args.threads)}
    return run_launched(args, launcher, np, model, 'ddp', env, 'ddp-bound')


def run_spawned(args, kind, np, model):
    """N processes with torchrun's environment (no ringfold involved)."""
    port = free_port()
    procs = []
    for r in range(np):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(np),
                   LOCAL_WORLD_SIZE=str(np), MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port),
                   OMP_NUM_THREADS=str(args.threads))
        procs.append(subprocess.Popen(worker_args(args, kind, model), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
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
            raise RuntimeError('%s rank failed (%d):\n%s\n%s' % (kind, p.returncode, out[-3000:], err[-3000:]))
        outs.append(out)
    return parse_result(outs[0], kind)


def loadavg():
    try:
        return ' '.join(open('/proc/loadavg').read().split()[:3])
    except OSError:
        return '?'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--np', type=int, nargs='+', default=[2, 4])
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--models', nargs='+', default=['digits', 'mlp10m'], choices=sorted(MODELS))
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--warmup', type=int, default=5)
    ap.add_argument('--batch-size', type=int, default=32)
    ap.add_argument('--threads', type=int, default=int(os.environ.get('RINGFOLD_BENCH_THREADS', '1')))
    ap.add_argument('--fp16', action='store_true', help='fp16 gradient compression in both')
    ap.add_argument('--local', action='store_true', help='also run the no-communication floor')
    ap.add_argument('--ddp-bound', action='store_true',
                    help='also run DDP started by ringfoldrun, with the same CPU binding as ringfold')
    ap.add_argument('--config', action='append', default=[],
                    help='NAME:K=V[,K=V...] an extra ringfold configuration (engine environment)')
    ap.add_argument('--ringfoldrun')
    ap.add_argument('--timeout', type=int, default=600)
    ap.add_argument('--worker', choices=['ringfold', 'ddp', 'local'], help=argparse.SUPPRESS)
    ap.add_argument('--model', default='digits', help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    launcher = find_launcher(args.ringfoldrun)
    base_env = {'OMP_NUM_THREADS': str(args.threads)}
    configs = [('ringfold', dict(base_env))]
    for spec in args.config:
        name, _, kvs = spec.partition(':')
        env = dict(base_env)
        for kv in filter(None, kvs.split(',')):
            k, _, v = kv.partition('=')
            env[k] = v
        configs.append((name, env))
    kinds = [c for c, _ in configs] + ['ddp'] + (['ddp-bound'] if args.ddp_bound else []) + \
        (['local'] if args.local else [])
    samples = {}          # (np, model, kind) -> [median_ms per repeat]
    params = {}
    load_start = loadavg()
    t_start = time.time()
    for np in args.np:
        for rep in range(args.repeats):
            for model in args.models:
                # Alternate which framework goes first, so neither always follows the other.
                order = kinds if rep % 2 == 0 else list(reversed(kinds))
                for kind in order:
                    if kind == 'ddp-bound' and np <= len(os.sched_getaffinity(0)):
                        continue  # not bound: the same as ddp
                    if kind == 'ddp' or kind == 'local':
                        res = run_spawned(args, kind, np, model)
                    elif kind == 'ddp-bound':
                        res = run_ddp_bound(args, launcher, np, model)
                    else:
                        res = run_ringfold(args, launcher, np, model, dict(configs)[kind])
                    samples.setdefault((np, model, kind), []).append(res['median_ms'])
                    params[model] = res['params']
                    print('<!-- np %d repeat %d %s %s: %.2f ms (load %s) -->'
                          % (np, rep + 1, model, kind, res['median_ms'], loadavg()), flush=True)

    print()
    print('%d CPUs, loopback, %d torch thread(s) per rank, batch %d per rank, %d timed steps after %d '
          'warm-up, %d repeats interleaved; load average %s at start, %s at end; %.0f s; torch %s%s'
          % (os.cpu_count(), args.threads, args.batch_size, args.steps, args.warmup, args.repeats,
             load_start, loadavg(), time.time() - t_start, _torch_version(), ', fp16 gradients' if args.fp16 else ''))
    print()
    extra = [c for c, _ in configs[1:]]
    head = ['model', 'params', 'ranks', 'ringfold (ms)', 'DDP gloo (ms)']
    if args.ddp_bound:
        head += ['DDP bound (ms)']
    head += ['ringfold/DDP']
    for c in extra:
        head += ['%s (ms)' % c, '%s/DDP' % c]
    if args.local:
        head += ['no comm (ms)']
    head += ['per repeat: ringfold; DDP%s (ms)' % ('; DDP bound' if args.ddp_bound else '')]
    print('| ' + ' | '.join(head) + ' |')
    print('|' + '|'.join(['---'] * 3 + ['---:'] * (len(head) - 4) + ['---']) + '|')
    for model in args.models:
        for np in args.np:
            m = {k: statistics.median(samples[(np, model, k)]) for k in kinds if (np, model, k) in samples}
            ddp = min(m['ddp'], m.get('ddp-bound', m['ddp']))  # the faster DDP
            row = [model, '%.2f M' % (params[model] / 1e6), str(np), '%.2f' % m['ringfold'], '%.2f' % m['ddp']]
            if args.ddp_bound:
                row += ['%.2f' % m['ddp-bound'] if 'ddp-bound' in m else '- (unbound)']
            row += ['**%.2f**' % (m['ringfold'] / ddp)]
            for c in extra:
                row += ['%.2f' % m[c], '%.2f' % (m[c] / ddp)]
            if args.local:
                row += ['%.2f' % m['local']]
            row += ['; '.join(' '.join('%.1f' % v for v in samples[(np, model, k)])
                              for k in ['ringfold', 'ddp', 'ddp-bound'] if (np, model, k) in samples)]
            print('| ' + ' | '.join(row) + ' |')


def _torch_version():
    try:
        import torch
        return torch.__version__
    except ImportError:
        return '?'


if __name__ == '__main__':
    main()
