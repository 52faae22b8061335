"""torch.distributed on one GPU machine over the stacks ringfold replaces or serves, side by side
(issues 20 and 21). Each stack runs a 2-rank job started here with env:// variables:

  nccl      torch's ProcessGroupNCCL on NVIDIA's NCCL (the reference)
  preload   ProcessGroupNCCL on ringfold's NCCL-API library (LD_PRELOAD=libnccl.so.2)
  plugin    NVIDIA's NCCL with ringfold's net plugin carrying the traffic
            (NCCL_NET=ringfold, NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1)
  socket    NVIDIA's NCCL over its own socket transport, P2P and SHM off (the plugin's baseline)
  ringfold  the backend "ringfold" (ringfold.torch.distributed) on CUDA tensors

Every rank checks each collective's result exactly (small integers, exact in every dtype),
trains a small MLP with DistributedDataParallel for a few steps, and times all_reduce at 4 B and
64 MiB. The driver prints one table, compares the trained parameters across stacks (at 2 ranks a
sum has one order, so they must match bit for bit) and exits 1 if a check failed.

    python3 tests/python/gpu_dropins.py [--stacks nccl,preload,...] [--nccl-lib PATH]
                                        [--net-plugin PATH] [--out DIR]

--nccl-lib is ringfold's libnccl.so.2 (default build/nccl/libnccl.so.2), --net-plugin its
libnccl-net-ringfold.so (default build/libnccl-net-ringfold.so). Both ranks use GPU 0 when the machine has one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1 lets
NVIDIA's NCCL >= 2.30.3 allow that). Without a GPU it says so and exits 0; --device cpu runs the
same on CPU tensors with gloo standing in for NCCL (stacks gloo,ringfold), which is how the script
itself is tested on machines without one (tests/python/CMakeLists.txt).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

from ports import free_port_pair  # tests/python/ports.py, next to this script

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RANKS = 2
NO_RINGFOLD = ('gloo', 'nccl', 'socket')  # the reference stacks
JOB_TIMEOUT = 80  # seconds per stack: a hang fails that stack, and five stacks fit gpu_check.sh's 420 s


# ---- the worker: one rank of one stack ----------------------------------------------------------

def worker(stack, device_kind, out):
    import torch
    import torch.distributed as dist
    rank, size = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    if device_kind == 'cuda':
        dev = torch.device('cuda', rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device('cpu')
    backend = {'ringfold': 'ringfold', 'gloo': 'gloo'}.get(stack, 'nccl')
    if backend == 'ringfold':
        import ringfold.torch.distributed  # noqa: F401  registers the backend
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
    sync = torch.cuda.synchronize if dev.type == 'cuda' else (lambda: None)
    checks = {}

    def check(name, fn):
        try:
            fn()
            checks[name] = 'ok'
        except Exception as e:  # every failure is reported, the other checks still run
            checks[name] = 'FAIL: %s: %s' % (type(e).__name__, str(e).splitlines()[0][:200])

    def ints(dtype, n, seed):  # small integers: exact in float16/bfloat16 sums of 2 ranks
        return ((torch.arange(n, dtype=torch.int64) * 7 + seed) % 13).to(dtype)

    def expect(got, want):
        got = got.cpu()
        if not torch.equal(got, want):
            diff = (got.double() - want.double()).abs().max().item()
            raise AssertionError('result differs from the expected one (largest difference %g)' % diff)

    def allreduce(dtype, n, op):
        def run():
            mine = ints(dtype, n, rank)
            x = mine.to(dev)
            dist.all_reduce(x, op=op)
            parts = [ints(dtype, n, r) for r in range(size)]
            if op == dist.ReduceOp.SUM:
                want = sum(p.double() for p in parts).to(dtype)
            elif op == dist.ReduceOp.MAX:
                want = torch.stack(parts).max(dim=0).values
            else:  # AVG of small integers over 2 ranks: halves, exact
                want = (sum(p.double() for p in parts) / size).to(dtype)
            expect(x, want)
        return run

    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
        name = str(dtype).replace('torch.', '')
        check('all_reduce sum %s' % name, allreduce(dtype, 1000, dist.ReduceOp.SUM))
    check('all_reduce max float32', allreduce(torch.float32, 1000, dist.ReduceOp.MAX))
    if backend != 'gloo':
        check('all_reduce avg float32', allreduce(torch.float32, 1000, dist.ReduceOp.AVG))
    check('all_reduce sum float32 64 MiB', allreduce(torch.float32, 16 << 20, dist.ReduceOp.SUM))

    def broadcast():
        x = ints(torch.float16, 333, rank).to(dev)
        dist.broadcast(x, src=1)
        expect(x, ints(torch.float16, 333, 1))
    check('broadcast float16 from rank 1', broadcast)

    def reduce_to_root():
        x = ints(torch.float32, 500, rank).to(dev)
        dist.reduce(x, dst=1)
        if rank == 1:
            expect(x, sum(ints(torch.float32, 500, r) for r in range(size)))
    check('reduce float32 to rank 1', reduce_to_root)

    def all_gather():
        out = torch.empty(size * 100, device=dev)
        dist.all_gather_into_tensor(out, ints(torch.float32, 100, rank).to(dev))
        expect(out, torch.cat([ints(torch.float32, 100, r) for r in range(size)]))
        outs = [torch.empty(7, device=dev) for _ in range(size)]
        dist.all_gather(outs, torch.full((7,), float(rank), device=dev))
        expect(torch.stack(outs), torch.stack([torch.full((7,), float(r)) for r in range(size)]))
    check('all_gather', all_gather)

    def reduce_scatter():
        full = [ints(torch.float32, size * 64, r) for r in range(size)]
        out = torch.empty(64, device=dev)
        dist.reduce_scatter_tensor(out, full[rank].to(dev))
        expect(out, sum(full)[rank * 64:(rank + 1) * 64])
    check('reduce_scatter_tensor', reduce_scatter)

    def all_to_all():
        # Rank r sends r + 1 + j elements to rank j: uneven splits.
        def block(src, dst):
            return torch.full((src + 1 + dst,), float(10 * src + dst))
        send = torch.cat([block(rank, j) for j in range(size)]).to(dev)
        recv_splits = [r + 1 + rank for r in range(size)]
        out = torch.empty(sum(recv_splits), device=dev)
        dist.all_to_all_single(out, send, recv_splits, [rank + 1 + j for j in range(size)])
        expect(out, torch.cat([block(r, rank) for r in range(size)]))
    check('all_to_all_single uneven', all_to_all)

    def send_recv():
        x = ints(torch.float32, 4096, 3).to(dev) if rank == 0 else torch.empty(4096, device=dev)
        if rank == 0:
            dist.send(x, 1)
            dist.recv(x, 1)
            expect(x, ints(torch.float32, 4096, 3) * 2)
        elif rank == 1:
            dist.recv(x, 0)
            dist.send(x * 2, 0)
    check('send/recv', send_recv)

    def async_work():
        works = [dist.all_reduce(torch.ones(5, device=dev) * (i + 1), async_op=True) for i in range(4)]
        for w in works:
            w.wait()
        fut = dist.all_reduce(torch.ones(3, device=dev), async_op=True).get_future()
        expect(fut.wait()[0], torch.full((3,), float(size)))
    check('async_op and get_future', async_work)
    check('barrier', lambda: dist.barrier())

    # DDP: the same model, data and optimizer on every stack.
    params = None

    def ddp():
        nonlocal params
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
        ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[dev.index] if dev.type == 'cuda' else None, bucket_cap_mb=0.05)
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
        gen = torch.Generator().manual_seed(100 + rank)
        for _ in range(6):
            x = torch.randn(32, 64, generator=gen).to(dev)
            y = torch.randint(0, 10, (32,), generator=gen).to(dev)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp_model(x), y).backward()
            opt.step()
        sync()
        params = torch.cat([p.detach().cpu().flatten() for p in model.parameters()])
    check('DDP 6 steps', ddp)

    # Timing: all_reduce per call, synchronized (median of the calls).
    timings = {}

    def timed(nbytes, calls):
        x = torch.ones(max(1, nbytes // 4), device=dev)
        for _ in range(5):
            dist.all_reduce(x)
        sync()
        t = []
        for _ in range(calls):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            sync()
            t.append(time.perf_counter() - t0)
        t.sort()
        return t[len(t) // 2] * 1e6

    def timing():
        timings['4 B'] = timed(4, 200)
        timings['64 MiB'] = timed(64 << 20, 10)
    check('timing', timing)

    dist.barrier()
    dist.destroy_process_group()
    if params is not None and rank == 0:
        torch.save(params, os.path.join(out, 'params_%s.pt' % stack))
    with open(os.path.join(out, 'result_%s_%d.json' % (stack, rank)), 'w') as f:
        json.dump({'checks': checks, 'timings_us': timings}, f)
    if stack in NO_RINGFOLD:
        # torch 2.15's gloo aborts at interpreter exit in about half the runs here ("terminate
        # called without an active exception", after the last Python frame): stacks without
        # ringfold skip the teardown; ringfold's own stacks exit normally, so theirs is checked.
        sys.stdout.flush()
        os._exit(0)


# ---- the driver ---------------------------------------------------------------------------------

def stack_env(stack, libs, nccl_version):
    env = {}
    if stack in ('nccl', 'plugin', 'socket'):
        env['NCCL_MULTI_RANK_GPU_ENABLE'] = '1'
    if stack == 'preload':
        env['LD_PRELOAD'] = libs['nccl']
        if nccl_version:
            env['RINGFOLD_NCCL_VERSION'] = str(nccl_version)
    if stack in ('plugin', 'socket'):
        env.update(NCCL_P2P_DISABLE='1', NCCL_SHM_DISABLE='1', NCCL_DEBUG='INFO', NCCL_DEBUG_SUBSYS='INIT,NET')
    if stack == 'plugin':
        env['NCCL_NET_PLUGIN'] = libs['plugin']
        env['NCCL_NET'] = 'ringfold'
    if stack == 'socket':
        env['NCCL_NET'] = 'Socket'
    return env


def run_stack(stack, device_kind, out, libs, nccl_version):
    results_of = [os.path.join(out, 'result_%s_%d.json' % (stack, r)) for r in range(RANKS)]
    for path in results_of + [os.path.join(out, 'params_%s.pt' % stack)]:
        if os.path.exists(path):
            os.remove(path)  # an earlier run's, in a reused --out: never read as this run's
    port = free_port_pair()  # torch's store on it, ringfold's on the next
    procs = []
    for r in range(RANKS):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(RANKS), LOCAL_RANK=str(r),
                   MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), **stack_env(stack, libs, nccl_version))
        with open(os.path.join(out, 'log_%s_%d.txt' % (stack, r)), 'w') as log:
            procs.append(subprocess.Popen([sys.executable, __file__, '--worker', stack, '--device', device_kind,
                                           '--out', out], env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
    deadline = time.time() + JOB_TIMEOUT
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1, deadline - time.time())))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    os.killpg(q.pid, 9)
            codes.append('timeout after %d s' % JOB_TIMEOUT)
    results = []
    for path in results_of:
        results.append(json.load(open(path)) if os.path.exists(path) else None)
    return codes, results


def plugin_loaded(out):
    """The plugin stack's proof that NCCL used ringfold's net plugin (its INFO lines)."""
    text = open(os.path.join(out, 'log_plugin_0.txt'), errors='replace').read()
    lines = [l.strip() for l in text.splitlines() if 'ringfold' in l and ('NET' in l or 'plugin' in l.lower())]
    return lines[:3]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--worker', help=argparse.SUPPRESS)
    ap.add_argument('--device', choices=('cuda', 'cpu'), default='cuda')
    ap.add_argument('--stacks', default='')
    ap.add_argument('--nccl-lib', default=os.path.join(ROOT, 'build', 'nccl', 'libnccl.so.2'))
    ap.add_argument('--net-plugin', default=os.path.join(ROOT, 'build', 'libnccl-net-ringfold.so'))
    ap.add_argument('--out', default='/tmp/gpu_dropins')
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.worker:
        worker(args.worker, args.device, args.out)
        return 0
    import torch
    if args.device == 'cuda' and not torch.cuda.is_available():
        print('gpu_dropins: skipped: no CUDA device on this machine')
        return 0
    stacks = [s for s in (args.stacks or ('nccl,preload,plugin,socket,ringfold' if args.device == 'cuda'
                                             else 'gloo,ringfold')).split(',') if s]
    libs = {'nccl': os.path.abspath(args.nccl_lib), 'plugin': os.path.abspath(args.net_plugin)}
    for stack, key in (('preload', 'nccl'), ('plugin', 'plugin')):
        if stack in stacks and not os.path.exists(libs[key]):
            print('gpu_dropins: %s needs %s, which does not exist' % (stack, libs[key]))
            return 1
    nccl_version = 0
    if args.device == 'cuda':
        v = torch.cuda.nccl.version()
        nccl_version = v[0] * 10000 + v[1] * 100 + v[2] if isinstance(v, tuple) else int(v)
        print('torch %s, NCCL %s, %d GPU(s): %s' % (torch.__version__, v, torch.cuda.device_count(),
                                                  torch.cuda.get_device_name(0)))
    failed = []
    rows, params = [], {}
    for stack in stacks:
        t0 = time.time()
        codes, results = run_stack(stack, args.device, args.out, libs, nccl_version)
        took = time.time() - t0
        ok = all(c == 0 for c in codes) and all(r is not None for r in results)
        checks = {}
        for r, res in enumerate(results):
            for name, verdict in (res or {}).get('checks', {}).items():
                if verdict != 'ok':
                    checks['%s (rank %d)' % (name, r)] = verdict
        if not ok or checks:
            failed.append(stack)
        timings = (results[0] or {}).get('timings_us', {})
        rows.append((stack, 'ok' if ok and not checks else 'FAILED', took, timings.get('4 B'), timings.get('64 MiB')))
        print('== %s: exit %s, %.1f s' % (stack, codes, took))
        for name, verdict in checks.items():
            print('   %s: %s' % (name, verdict))
        if not ok:
            print('   logs: %s/log_%s_*.txt; the end of rank 0\'s:' % (args.out, stack))
            tail = open(os.path.join(args.out, 'log_%s_0.txt' % stack), errors='replace').read().splitlines()[-6:]
            for line in tail:
                print('   | ' + line[:300])
        if stack == 'plugin' and ok:
            lines = plugin_loaded(args.out)
            print('   NCCL said: %s' % (' | '.join(lines) if lines else 'nothing about ringfold (not loaded?)'))
            if not lines:
                failed.append('plugin (not loaded)')
        path = os.path.join(args.out, 'params_%s.pt' % stack)
        if os.path.exists(path):
            params[stack] = torch.load(path)

    print('\n| stack | result | job (s) | all_reduce 4 B (us) | all_reduce 64 MiB (us) | 64 MiB algbw (GB/s) |')
    print('|---|---|---:|---:|---:|---:|')
    for stack, verdict, took, small, large in rows:
        fmt = lambda v: '%.1f' % v if v else '-'
        bw = '%.2f' % ((64 << 20) / (large * 1e-6) / 1e9) if large else '-'
        print('| %s | %s | %.1f | %s | %s | %s |' % (stack, verdict, took, fmt(small), fmt(large), bw))
    if params:
        ref_name = next(iter(params))
        ref = params[ref_name]
        print('\nDDP parameters against %s (6 steps, 2 ranks):' % ref_name)
        for stack, p in params.items():
            same = torch.equal(p, ref)
            print('  %s: %s' % (stack, 'bitwise identical' if same else
                                'DIFFER, largest difference %g' % (p - ref).abs().max().item()))
            if not same:
                failed.append('%s (DDP parameters)' % stack)
    print('\n%s' % ('FAILED: ' + ', '.join(failed) if failed else 'all stacks passed'))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
