#!/usr/bin/env python3
"""Per-call overhead of ringfold.torch's hvd.allreduce on a 4-byte tensor, beyond the raw
C-level collective latency (issue 4's target: at most 20 us).

One command launches everything and prints a markdown report:

    python bench/python/torch_overhead.py --np 2 --rounds 5

Each round launches, one after the other (so the two kinds interleave over the run):
  1. `ringfoldrun -np N python torch_overhead.py --worker`: every rank runs, in interleaved
     blocks of --calls calls each, with the previous call completed before the next starts:
       hvd          hvd.allreduce(torch.ones(1), name='lat')       (the Horovod call)
       hvd-noname   hvd.allreduce(torch.ones(1))                    (auto-named: no cache hit)
       ctypes       ringfold_allreduce_async + ringfold_wait + ringfold_release through ctypes
                    on a preallocated float, name 'allreduce.lat' (what hvd sends)
       ctypes-noname the same with name NULL
     and two instrumented blocks that split each call into the time inside ringfold_wait and
     the time outside it (the Python-side cost, the cleanest measure of wrapper overhead):
       hvd-split, ctypes-split.
  2. `ringfoldrun -np N engine_perf --latency CALLS`: the C++ enqueue -> wait -> release loop
     on the engine directly (no C ABI, no Python), name 'latency'.

Latency is dominated by the engine's cycle (a fixed-period loop, RINGFOLD_CYCLE_TIME, 0.1 ms
here by default instead of 1 ms to reduce the phase noise): a call waits for the next cycle,
then negotiates. The end-to-end difference hvd - C therefore carries that noise; the
outside-wait time does not. Overheads are per call: median over all calls of all rounds (the
per-round medians are printed too, to show their spread).

Environment knobs: each rank uses --threads torch threads (default 1: the ranks share the
cores). Rank 0 also times hvd.allreduce over a stubbed C library (no-op Python stand-ins for
enqueue, wait, poll and release; a hot loop): Python's own cost per call. --profile runs
cProfile over that loop (first round) and prints the top functions by own time.

Paths: --ringfoldrun (default: build/ringfoldrun, else `ringfoldrun` on PATH), --engine-perf
(default build/bench/engine_perf; skipped when absent). The ringfold package and library come
from the environment (PYTHONPATH, RINGFOLD_LIBRARY) as for any ringfold program.
"""
import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

from launcher import ROOT, find_launcher  # noqa: E402  (bench/python/launcher.py)
BLOCKS = ('hvd', 'ctypes', 'hvd-noname', 'ctypes-noname', 'hvd-split', 'ctypes-split')


# ---- worker (one per rank) ------------------------------------------------------------------

def _timed_lib(real, box, marks):
    """An object with the CDLL's functions as plain attributes (as fast to reach as on the CDLL,
    which caches them the same way). ringfold_wait adds its duration to box[0]; the C calls of
    one operation (enqueue, wait, poll, release) append (name, entry, exit) to `marks`, which
    splits a call into C time and the Python time between the C calls."""
    from ringfold import _lib as rl

    class Timed:
        pass
    t = Timed()
    for name in rl._SIGNATURES:
        setattr(t, name, getattr(real, name))
    clock = time.perf_counter
    append = marks.append

    def wrap(name, fn, waits=False):
        def timed(*a):
            t0 = clock()
            try:
                return fn(*a)
            finally:
                t1 = clock()
                append((name, t0, t1))
                if waits:
                    box[0] += t1 - t0
        return timed
    t.ringfold_wait = wrap('wait', real.ringfold_wait, waits=True)
    t.ringfold_enqueue = wrap('enqueue', real.ringfold_enqueue)
    t.ringfold_allreduce_async = wrap('enqueue', real.ringfold_allreduce_async)
    t.ringfold_poll = wrap('poll', real.ringfold_poll)
    t.ringfold_release = wrap('release', real.ringfold_release)
    return t


# Stages of one call, from the C-call marks: Python before the enqueue call, the C enqueue,
# Python between enqueue and the first wait, the wait(s), Python after the wait until the next C
# call (poll or release), poll, release, Python after release until the call returns.
STAGES = ('py:before-enqueue', 'c:enqueue', 'py:enqueue->wait', 'c:wait', 'py:wait->next',
          'c:poll', 'c:release', 'py:after-release')


def _stages(t0, t_end, marks):
    d = dict.fromkeys(STAGES, 0.0)
    enq = [m for m in marks if m[0] == 'enqueue'][0]
    waits = [m for m in marks if m[0] == 'wait']
    polls = [m for m in marks if m[0] == 'poll']
    rel = [m for m in marks if m[0] == 'release'][-1]
    d['py:before-enqueue'] = enq[1] - t0
    d['c:enqueue'] = enq[2] - enq[1]
    d['py:enqueue->wait'] = waits[0][1] - enq[2]
    d['c:wait'] = sum(w[2] - w[1] for w in waits) + sum(waits[i + 1][1] - waits[i][2] for i in range(len(waits) - 1))
    nxt = min([p[1] for p in polls if p[1] >= waits[-1][2]] + [rel[1]])
    d['py:wait->next'] = nxt - waits[-1][2]
    d['c:poll'] = sum(p[2] - p[1] for p in polls)
    d['c:release'] = rel[2] - rel[1]
    d['py:after-release'] = t_end - rel[2] - (sum(p[2] - p[1] for p in polls if p[1] > rel[2]))
    return d


def worker(args):
    import torch
    import ringfold.torch as hvd
    from ringfold import _lib as rl

    torch.set_num_threads(args.threads)
    hvd.init()
    lib = rl.lib()
    fn = lib.ringfold_allreduce_async
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                   ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_double, ctypes.c_double,
                   ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    wait, release = lib.ringfold_wait, lib.ringfold_release
    one = ctypes.c_float(1.0)
    res = ctypes.c_float(0.0)
    shape = (ctypes.c_int64 * 1)(1)
    handle = ctypes.c_int64()
    p_one, p_res, p_handle = ctypes.byref(one), ctypes.byref(res), ctypes.byref(handle)
    clock = time.perf_counter
    SUM = 1

    def raw(name):
        status = fn(p_one, p_res, rl.FLOAT32, shape, 1, name, SUM, 1.0, 1.0, 0, -1, p_handle)
        if status:
            rl.check(status)
        h = handle.value
        status = wait(h, 1.0)
        while status == rl.IN_PROGRESS:
            status = wait(h, 1.0)
        rl.check(status)
        release(h)

    box = [0.0]
    marks = []
    timed = _timed_lib(lib, box, marks)
    stages = {'hvd-split': {k: [] for k in STAGES}, 'ctypes-split': {k: [] for k in STAGES}}

    def block(kind, n):
        total, outside = [], []
        x = torch.ones(1)
        if kind in ('hvd-split', 'ctypes-split'):
            saved = rl._lib
            rl._lib = timed
            f, w, rel = timed.ringfold_allreduce_async, timed.ringfold_wait, timed.ringfold_release
            try:
                for _ in range(n):
                    box[0] = 0.0
                    del marks[:]
                    t0 = clock()
                    if kind == 'hvd-split':
                        hvd.allreduce(x, name='lat')
                    else:
                        status = f(p_one, p_res, rl.FLOAT32, shape, 1, b'allreduce.lat', SUM, 1.0, 1.0,
                                   0, -1, p_handle)
                        rl.check(status)
                        h = handle.value
                        status = w(h, 1.0)
                        while status == rl.IN_PROGRESS:
                            status = w(h, 1.0)
                        rl.check(status)
                        rel(h)
                    t1 = clock()
                    total.append(t1 - t0)
                    outside.append(t1 - t0 - box[0])
                    for k, v in _stages(t0, t1, marks).items():
                        stages[kind][k].append(v)
            finally:
                rl._lib = saved
            return total, outside
        for _ in range(n):
            t0 = clock()
            if kind == 'hvd':
                hvd.allreduce(x, name='lat')
            elif kind == 'hvd-noname':
                hvd.allreduce(x)
            elif kind == 'ctypes':
                raw(b'allreduce.lat')
            else:
                raw(None)
            total.append(clock() - t0)
        return total, None

    # Warm up every path (first calls negotiate, fill the response cache, import lazily).
    for kind in BLOCKS:
        block(kind, 50)
    out = {k: [] for k in BLOCKS}
    outside = {'hvd-split': [], 'ctypes-split': []}
    per = max(1, args.calls // args.interleave)
    for _ in range(args.interleave):
        for kind in BLOCKS:
            total, outs = block(kind, per)
            out[kind] += total
            if outs is not None:
                outside[kind] += outs
    # Sanity: the result is right.
    assert hvd.allreduce(torch.ones(1), name='check', op=hvd.Sum).item() == hvd.size()
    rank, size = hvd.rank(), hvd.size()
    hvd.shutdown()   # stops the engine threads, which would compete with the loop below

    # The wrapper alone: the C library replaced by no-op Python stubs (ringfold_enqueue returns
    # OK, wait OK, poll "done", release OK), hot loop, rank 0 only. This is Python's own cost
    # of one hvd.allreduce (plus ~0.15 us for the four stub calls), without the cache misses
    # and CPU contention the real loop suffers after each wait (run after shutdown, so no engine
    # thread competes for the cores); cProfile on the same loop
    # attributes it to functions (the real loop's profile only shows the C wait).
    stub_us = stub_inplace_us = None
    profile_text = None
    if rank == 0:
        class Stub:
            pass
        stub = Stub()
        for name in rl._SIGNATURES:
            setattr(stub, name, getattr(lib, name))
        stub.ringfold_enqueue = lambda op, a, b, h: 0
        stub.ringfold_allreduce_async = lambda *args: 0
        stub.ringfold_wait = lambda h, t: 0
        stub.ringfold_poll = lambda h: 1
        stub.ringfold_release = lambda h: 0
        saved = rl._lib
        rl._lib = stub
        try:
            x = torch.ones(1)
            n = 20000

            def best(fn):
                runs = []
                for _ in range(5):
                    t0 = clock()
                    for _ in range(n):
                        fn()
                    runs.append((clock() - t0) / n * 1e6)
                return min(runs)
            stub_us = best(lambda: hvd.allreduce(x, name='lat'))
            stub_inplace_us = best(lambda: hvd.allreduce_(x, name='lat'))
            if args.profile:
                import cProfile
                import io
                import pstats
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(n):
                    hvd.allreduce(x, name='lat')
                prof.disable()
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats('tottime').print_stats(20)
                profile_text = re.sub(r'^.*?(?=\s+ncalls)', '', s.getvalue(), flags=re.S)
                profile_text = profile_text.replace(os.path.dirname(os.path.dirname(rl.__file__)) + '/', '')
        finally:
            rl._lib = saved

    if rank == 0:
        us = lambda v: [round(t * 1e6, 2) for t in v]
        print('RESULT ' + json.dumps({'total': {k: us(v) for k, v in out.items()},
                                      'outside': {k: us(v) for k, v in outside.items()},
                                      'stages': {b: {k: us(v) for k, v in st.items()}
                                                 for b, st in stages.items()},
                                      'stub_us': stub_us, 'stub_inplace_us': stub_inplace_us,
                                      'size': size, 'torch': torch.__version__}), flush=True)
        if profile_text:
            print('PROFILE_BEGIN\n' + profile_text + '\nPROFILE_END', flush=True)


# ---- driver ---------------------------------------------------------------------------------


def launch(launcher, np, env, cmd, timeout=600):
    full = [launcher, '-np', str(np)]
    for k in sorted(env):
        full += ['-x', '%s=%s' % (k, env[k])]
    full += cmd
    proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})
    if proc.returncode != 0:
        raise RuntimeError('%s failed (%d):\n%s\n%s' % (' '.join(full), proc.returncode,
                                                        proc.stdout[-4000:], proc.stderr[-4000:]))
    return proc.stdout


def strip_prefix(text):
    return '\n'.join(re.sub(r'^\[\d+\]<std(out|err)>:', '', line) for line in text.splitlines())


def med(v):
    return statistics.median(v) if v else float('nan')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--np', type=int, nargs='+', default=[2])
    ap.add_argument('--rounds', type=int, default=5, help='launches of each kind, interleaved')
    ap.add_argument('--calls', type=int, default=400, help='timed calls per kind per launch')
    ap.add_argument('--interleave', type=int, default=4, help='blocks per kind per launch')
    ap.add_argument('--cycle-time', default='0.1', help='RINGFOLD_CYCLE_TIME in ms')
    ap.add_argument('--threads', type=int, default=int(os.environ.get('RINGFOLD_BENCH_THREADS', '1')))
    ap.add_argument('--profile', action='store_true', help='cProfile the stubbed hvd.allreduce loop on rank 0 (first round)')
    ap.add_argument('--ringfoldrun')
    ap.add_argument('--engine-perf', default=os.path.join(ROOT, 'build', 'bench', 'engine_perf'))
    ap.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    launcher = find_launcher(args.ringfoldrun)
    env = {'RINGFOLD_CYCLE_TIME': args.cycle_time, 'OMP_NUM_THREADS': str(args.threads)}
    have_c = os.path.isfile(args.engine_perf)
    try:
        load = open('/proc/loadavg').read().split()[:3]
    except OSError:
        load = ['?']
    print('# hvd.allreduce per-call overhead, 4-byte float32 tensor\n')
    print('cycle time %s ms, %d torch thread(s) per rank, %d rounds x %d calls per kind, '
          '%d CPUs, load average at start %s\n'
          % (args.cycle_time, args.threads, args.rounds, args.calls, os.cpu_count(), ' '.join(load)))
    for np in args.np:
        allt = {k: [] for k in BLOCKS}
        allo = {'hvd-split': [], 'ctypes-split': []}
        allc = []
        stubs, stubs_inplace = [], []
        alls = {b: {k: [] for k in STAGES} for b in ('hvd-split', 'ctypes-split')}
        rounds = []
        profile = None
        for r in range(args.rounds):
            worker_cmd = [sys.executable, os.path.abspath(__file__), '--worker', '--calls', str(args.calls),
                          '--interleave', str(args.interleave), '--threads', str(args.threads)]
            if args.profile and r == 0:
                worker_cmd.append('--profile')
            out = strip_prefix(launch(launcher, np, env, worker_cmd))
            m = re.search(r'^RESULT (.*)$', out, re.M)
            if not m:
                raise RuntimeError('no RESULT line in:\n' + out)
            res = json.loads(m.group(1))
            pm = re.search(r'PROFILE_BEGIN\n(.*)\nPROFILE_END', out, re.S)
            if pm:
                profile = pm.group(1)
            c_med = float('nan')
            if have_c:
                cout = strip_prefix(launch(launcher, np, env, [
                    args.engine_perf, '--tensors', '1', '--total', '64', '--steps', '1', '--warmup', '0',
                    '--latency', str(args.calls)]))
                cm = re.search(r'latency_4B median_us ([0-9.]+)', cout)
                if cm:
                    c_med = float(cm.group(1))
                    allc.append(c_med)
            for k in BLOCKS:
                allt[k] += res['total'][k]
            for k in allo:
                allo[k] += res['outside'][k]
            stubs.append(res['stub_us'])
            stubs_inplace.append(res['stub_inplace_us'])
            for b in alls:
                for k in STAGES:
                    alls[b][k] += res['stages'][b][k]
            row = {k: med(res['total'][k]) for k in BLOCKS}
            row['C'] = c_med
            row['out-hvd'] = med(res['outside']['hvd-split'])
            row['out-ctypes'] = med(res['outside']['ctypes-split'])
            rounds.append(row)
            print('<!-- np %d round %d: %s -->' % (np, r + 1, ' '.join('%s=%.1f' % kv for kv in row.items())),
                  flush=True)
        t = {k: med(v) for k, v in allt.items()}
        o = {k: med(v) for k, v in allo.items()}
        c = med(allc)
        print('\n## %d ranks\n' % np)
        print('| measurement | median per call (us) |')
        print('|---|---:|')
        print('| C++ engine_perf --latency (enqueue->wait->release, no ABI, no Python) | %.1f |' % c)
        print('| ctypes: ringfold_allreduce_async + wait + release, named | %.1f |' % t['ctypes'])
        print('| ctypes, unnamed (NULL) | %.1f |' % t['ctypes-noname'])
        print('| hvd.allreduce(torch.ones(1), name=...) | %.1f |' % t['hvd'])
        print('| hvd.allreduce(torch.ones(1)) unnamed | %.1f |' % t['hvd-noname'])
        print('| hvd.allreduce, time outside ringfold_wait (Python side) | %.1f |' % o['hvd-split'])
        print('| ctypes sequence, time outside ringfold_wait | %.1f |' % o['ctypes-split'])
        print()
        print('- end to end, hvd - C++: **%.1f us**; hvd - ctypes: %.1f us; hvd unnamed - ctypes unnamed: %.1f us'
              % (t['hvd'] - c, t['hvd'] - t['ctypes'], t['hvd-noname'] - t['ctypes-noname']))
        print('- Python-side cost per call (outside the wait): hvd **%.1f us**, the bare ctypes sequence %.1f us; '
              'wrapper overhead over ctypes %.1f us'
              % (o['hvd-split'], o['ctypes-split'], o['hvd-split'] - o['ctypes-split']))
        spread = lambda key: '%.1f..%.1f' % (min(x[key] for x in rounds), max(x[key] for x in rounds))
        print('- the wrapper alone, C library stubbed out (hot loop, rank 0): hvd.allreduce **%.2f us**, '
              'hvd.allreduce_ (in place) %.2f us per call' % (med(stubs), med(stubs_inplace)))
        print('- per-round medians (min..max over %d rounds): hvd %s, ctypes %s, C++ %s, hvd outside-wait %s'
              % (len(rounds), spread('hvd'), spread('ctypes'), spread('C'), spread('out-hvd')))
        print('\nWhere one call\'s time goes (median per stage over all calls; the stage medians need '
              'not add up to the total\'s median):\n')
        print('| stage | hvd.allreduce (us) | ctypes sequence (us) | difference |')
        print('|---|---:|---:|---:|')
        for k in STAGES:
            a, b = med(alls['hvd-split'][k]), med(alls['ctypes-split'][k])
            print('| %s | %.2f | %.2f | %.2f |' % (k, a, b, a - b))
        if profile:
            print('\ncProfile of 20000 hvd.allreduce calls over the stubbed library (rank 0, top by own '
                  'time; cProfile inflates every call):\n')
            print('```\n' + profile.strip() + '\n```')
    try:
        load = open('/proc/loadavg').read().split()[:3]
        print('\nload average at end %s' % ' '.join(load))
    except OSError:
        pass


if __name__ == '__main__':
    main()
