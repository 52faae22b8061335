#!/usr/bin/env python3
"""Soak of the ringfold engine: a multi-rank job of random collectives, with each rank's RSS and
open descriptors sampled, and a verdict on whether they stay flat.

    python3 bench/soak/soak.py [--minutes 30] [--np 4] [--interval 5] [--seed S]
                               [--cpu 1.0] [--out bench/results] [--build build]
                               [--max-bytes N] [--fixed-names] [--no-sets] [--glibc-dynamic-mmap]

Contract
  * The driver (this script without --worker) starts `ringfoldrun -np NP <venv python> soak.py
    --worker ...` with the installed wheel (<build>/python-site, from scripts/python_package.sh)
    and the numpy-only venv (scripts/pyenv.sh bindings/python/requirements-plain.txt).
  * Every rank runs the same random plan (one seed, drawn identically on every rank) for
    --minutes: epochs of allreduce (sum/min/max), allgather, broadcast, alltoall and
    reducescatter on tensors of 1 B to 4 MiB, uint8/int32/int64/float32/float64, under random
    fresh names, sometimes several in flight at once (fused); on the global set or on dynamic
    process sets that are added and removed as it goes; and join epochs, where ranks run out of
    data after different numbers of batches and call join(). Every result is checked bit for bit
    against what the rank computes locally; the first mismatch stops the job (exit 1).
  * Ranks pace themselves: each keeps its process's CPU time (all its threads) under --cpu/NP of
    a core over the run, so the whole job uses about --cpu cores at most.
  * The ranks run with glibc's mmap threshold fixed (MALLOC_MMAP_THRESHOLD_=131072, unless the
    environment sets it or --glibc-dynamic-mmap is given): see GLIBC_MMAP_THRESHOLD below.
  * A sampler in the driver reads, every --interval seconds, /proc of each rank and of the
    launcher (which hosts the store): RSS, open descriptors, threads, CPU seconds. Rows go to
    <out>/soak.csv (elapsed_s,who,pid,rss_kib,fds,threads,cpu_s).
  * At the end: <out>/soak.svg (RSS and descriptors against time, one line per process; drawn by
    this script, no plotting library), and <out>/soak.md with the command, the machine, the
    counts of verified operations and, per process, the least-squares slope of RSS (KiB/min) and
    of descriptors (per min) over the last 2/3 of the run. Verdict "flat" when, for every
    process, the fitted RSS growth over that window is under max(4 MiB, 2% of its mean RSS) and
    the fitted descriptor growth under 1 (or, as descriptors rise and fall with the process sets
    alive, the last quarter's lowest and highest counts no higher than the first quarter's).
    Exit status: 0 when the job succeeded and everything
    is flat, 1 otherwise.
"""
import argparse
import ast
import csv
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MAX_BYTES = 4 << 20
# Narrowing switches, to find which part of the mix a growth comes from. They act after the
# random draws, so every rank still draws the same sequence: --max-bytes caps the sizes,
# --fixed-names reuses 50 names instead of fresh ones, --no-sets keeps to the global set.
LIMITS = {'max_bytes': MAX_BYTES, 'fixed_names': False, 'no_sets': False}
# glibc's malloc serves a block of 128 KiB or more with its own mmap, but after such a block is
# freed it raises that threshold to the block's size (up to 32 MiB): from then on the soak's own
# multi-MiB numpy temporaries come from the heap, whose free holes RSS keeps. With the default, a
# rank's RSS climbed 7.6 MiB/min while its heap in use stayed flat (bench/results/soak.md). The
# ranks run with the threshold fixed at glibc's initial value (an environment tunable, inherited
# through ringfoldrun), so the RSS measures what is held, not where the allocator put it;
# --glibc-dynamic-mmap keeps glibc's default.
GLIBC_MMAP_THRESHOLD = 128 << 10
DTYPES = ['uint8', 'int32', 'int64', 'float32', 'float64']


# ---------------------------------------------------------------------------------------------
# The plan: drawn from one Random on every rank, so every rank makes the same choices.
# ---------------------------------------------------------------------------------------------

def _nbytes(rng):
    """Log-uniform between 1 B and MAX_BYTES (at most --max-bytes)."""
    return min(LIMITS['max_bytes'], max(1, int(2 ** rng.uniform(0, 22))))


def _name(rng, epoch, j):
    word = ''.join(rng.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(rng.randint(3, 12)))
    if LIMITS['fixed_names']:
        return 'n%d.%d' % (sum(map(ord, word)) % 50, j)
    return '%s.%d.%d' % (word, epoch, j)


def plan_epoch(rng, epoch, size, live_sets):
    """One epoch: a change to the dynamic sets (None, ('add', ranks) or ('remove', index)),
    then either a join epoch or a list of ops for one set (an index into the sets as they are
    after the change). live_sets: tuples of ranks, the ranks' registered sets in order."""
    change = None
    r = rng.random()
    if r < 0.15 and len(live_sets) < 3 and size > 2:
        k = rng.randint(2, size - 1)
        ranks = tuple(sorted(rng.sample(range(size), k)))
        if ranks not in live_sets and not LIMITS['no_sets']:
            change = ('add', ranks)
    elif r < 0.25 and live_sets:
        change = ('remove', rng.randrange(len(live_sets)))
    after = list(live_sets)
    if change and change[0] == 'add':
        after.append(change[1])
    elif change:
        after.pop(change[1])
    if rng.random() < 0.1:
        batches = [rng.randint(0, 6) for _ in range(size)]
        dtype = rng.choice(DTYPES)
        shapes = [_nbytes(rng) for _ in range(max(batches))]
        return change, ('join', batches, dtype, shapes)
    set_index = None
    if after and rng.random() < 0.5:
        set_index = rng.randrange(len(after))
    ops = []
    for j in range(rng.choice([1, 1, 1, 2, 3, 6])):
        kind = rng.choice(['allreduce', 'allreduce', 'allgather', 'broadcast', 'alltoall',
                           'reducescatter'])
        op = {'kind': kind, 'name': _name(rng, epoch, j), 'dtype': rng.choice(DTYPES),
              'bytes': _nbytes(rng), 'reduce': rng.choice(['Sum', 'Min', 'Max']),
              'root': rng.randrange(size), 'seed': rng.randrange(1 << 30),
              'rows': [rng.randint(0, 5) for _ in range(size)]}
        ops.append(op)
    return change, ('ops', set_index, ops)


# ---------------------------------------------------------------------------------------------
# Worker: one rank.
# ---------------------------------------------------------------------------------------------

def _data(np, dtype, n, rank, seed):
    """This rank's deterministic tensor of n elements; small integers, so sums are exact in
    every dtype (uint8 sums wrap identically on both sides)."""
    return ((np.arange(n, dtype=np.int64) * 7 + rank * 13 + seed) % 101).astype(dtype)


def _reduce(np, arrays, how, dtype):
    out = arrays[0].copy()
    for a in arrays[1:]:
        if how == 'Sum':
            out = (out + a).astype(dtype)
        elif how == 'Min':
            out = np.minimum(out, a)
        else:
            out = np.maximum(out, a)
    return out


def _check(np, got, want, what):
    got = np.asarray(got)
    if got.dtype != want.dtype or got.shape != want.shape or \
            got.tobytes() != want.tobytes():
        raise SystemExit('soak: WRONG RESULT for %s: got %s %s, want %s %s' %
                         (what, got.dtype, got.shape, want.dtype, want.shape))


def run_ops(np, rf, ops, members, rank, ps):
    """Starts every op of the list (in flight together), then checks each result."""
    me = members.index(rank)
    n = len(members)
    pending = []
    for op in ops:
        dtype = np.dtype(op['dtype'])
        count = max(1, op['bytes'] // dtype.itemsize)
        kind = op['kind']
        if kind == 'allreduce':
            x = _data(np, dtype, count, rank, op['seed'])
            want = _reduce(np, [_data(np, dtype, count, r, op['seed']) for r in members],
                           op['reduce'], dtype)
            h = rf.allreduce_async(x, name=op['name'], op=getattr(rf, op['reduce']), process_set=ps)
        elif kind == 'allgather':
            cols = max(1, count // 8)
            rows = [op['rows'][r] for r in members]
            x = _data(np, dtype, rows[me] * cols, rank, op['seed']).reshape(rows[me], cols)
            want = np.concatenate([_data(np, dtype, rows[i] * cols, r, op['seed']).reshape(rows[i], cols)
                                   for i, r in enumerate(members)])
            h = rf.allgather_async(x, name=op['name'], process_set=ps)
        elif kind == 'broadcast':
            root = members[op['root'] % n]
            x = _data(np, dtype, count, rank, op['seed'])
            want = _data(np, dtype, count, root, op['seed'])
            h = rf.broadcast_async(x, root, name=op['name'], process_set=ps)
        elif kind == 'alltoall':
            cols = max(1, count // (8 * n))
            # rank r sends (r + j) % 3 rows to set member j
            splits = [(rank + j) % 3 for j in range(n)]
            rows = sum(splits)
            x = _data(np, dtype, rows * cols, rank, op['seed']).reshape(rows, cols)
            parts = []
            for i, r in enumerate(members):
                s = [(r + j) % 3 for j in range(n)]
                src = _data(np, dtype, sum(s) * cols, r, op['seed']).reshape(sum(s), cols)
                start = sum(s[:me])
                parts.append(src[start:start + s[me]])
            want = np.concatenate(parts)
            h = rf.alltoall_async(x, splits=np.array(splits, dtype=np.int32), name=op['name'],
                                  process_set=ps)
        else:  # reducescatter: first dimension a multiple of the set size
            cols = max(1, count // (4 * n))
            rows = n * (1 + op['rows'][0])
            full = [_data(np, dtype, rows * cols, r, op['seed']).reshape(rows, cols) for r in members]
            x = full[me]
            per = rows // n
            want = _reduce(np, full, 'Sum', dtype)[me * per:(me + 1) * per]
            h = rf.reducescatter_async(x, name=op['name'], op=rf.Sum, process_set=ps)
        pending.append((h, want, '%s %s (%s, %d B) on ranks %s' %
                        (kind, op['name'], op['dtype'], op['bytes'], members)))
    done_bytes = 0
    for h, want, what in pending:
        got = rf.synchronize(h)
        if isinstance(got, tuple):
            got = got[0]
        _check(np, got, want, what)
        done_bytes += want.nbytes
    return len(pending), done_bytes


def run_join(np, rf, plan, rank, size, epoch):
    batches, dtype, shapes = plan[1], np.dtype(plan[2]), plan[3]
    for i in range(batches[rank]):
        count = max(1, shapes[i] // dtype.itemsize)
        x = _data(np, dtype, count, rank, epoch + i)
        # Ranks that have joined contribute zeros (Horovod's join).
        live = [r for r in range(size) if batches[r] > i]
        want = _reduce(np, [_data(np, dtype, count, r, epoch + i) for r in live], 'Sum', dtype)
        got = rf.allreduce(x, name='join.%d.%d' % (epoch, i), op=rf.Sum)
        _check(np, got, want, 'allreduce join.%d.%d (%s, ranks with data %s)' % (epoch, i, dtype, live))
    last = rf.join()
    top = max(batches)
    if top > 0 and batches[last] != top:
        raise SystemExit('soak: join returned rank %d, which had %d batches; the last to join '
                         'has %d (%s)' % (last, batches[last], top, batches))
    return batches[rank]


def worker(args):
    import ctypes
    import numpy as np
    import ringfold as rf
    LIMITS.update(max_bytes=args.max_bytes, fixed_names=args.fixed_names, no_sets=args.no_sets)
    heap_path = os.path.join(args.run_dir, 'rank%d.heap' % int(os.environ.get('RINGFOLD_RANK', '0')))
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2

        class MallInfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in
                        ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks', 'fsmblks',
                         'uordblks', 'fordblks', 'keepcost')]
        mallinfo2.restype = MallInfo2
    except (AttributeError, OSError):
        mallinfo2 = None
    rf.init(process_sets='dynamic')
    rank, size = rf.rank(), rf.size()
    with open(os.path.join(args.run_dir, 'rank%d.pid' % rank), 'w') as f:
        f.write(str(os.getpid()))
    rng = random.Random(args.seed)
    deadline = time.time() + args.minutes * 60
    live_sets = []          # tuples of ranks, in the order added
    live_objs = []          # the matching rf.ProcessSet objects
    counts = {'epochs': 0, 'ops': 0, 'bytes': 0, 'joins': 0, 'join_batches': 0, 'sets_added': 0,
              'sets_removed': 0}
    share = args.cpu / size
    start_wall, start_cpu = time.time(), time.process_time()
    last_report = last_heap = start_wall
    epoch = 0
    while True:
        # Rank 0's clock decides when to stop; everyone learns it by a broadcast.
        go = np.array([1 if time.time() < deadline else 0], dtype=np.int32)
        go = rf.broadcast(go, 0, name='soak.go')
        if not go[0]:
            break
        change, plan = plan_epoch(rng, epoch, size, live_sets)
        if change and change[0] == 'add':
            live_objs.append(rf.add_process_set(list(change[1])))
            live_sets.append(change[1])
            counts['sets_added'] += 1
        elif change:
            ps = live_objs.pop(change[1])
            live_sets.pop(change[1])
            if not rf.remove_process_set(ps):
                raise SystemExit('soak: remove_process_set(%s) returned False' % (ps.ranks,))
            counts['sets_removed'] += 1
        if plan[0] == 'join':
            counts['join_batches'] += run_join(np, rf, plan, rank, size, epoch)
            counts['joins'] += 1
        else:
            _, set_index, ops = plan
            if set_index is None:
                members, ps = list(range(size)), rf.global_process_set
            else:
                members, ps = list(live_sets[set_index]), live_objs[set_index]
            if rank in members:
                n, b = run_ops(np, rf, ops, members, rank, ps)
                counts['ops'] += n
                counts['bytes'] += b
        epoch += 1
        counts['epochs'] = epoch
        # Pace: this process's CPU time (all threads) stays under `share` of a core.
        used = time.process_time() - start_cpu
        ahead = used / share - (time.time() - start_wall)
        if ahead > 0:
            time.sleep(min(ahead, 2.0))
        if mallinfo2 is not None and time.time() - last_heap > 2:
            # Bytes malloc has handed out and not had back (arenas and mmapped blocks): a leak
            # grows this; fragmentation grows RSS alone.
            last_heap = time.time()
            m = mallinfo2()
            with open(heap_path + '.tmp', 'w') as f:
                f.write(str((m.uordblks + m.hblkhd) // 1024))
            os.replace(heap_path + '.tmp', heap_path)
        if rank == 0 and time.time() - last_report > 60:
            last_report = time.time()
            print('soak: %.1f min, %s' % ((last_report - start_wall) / 60, counts), flush=True)
    rf.barrier()
    totals = rf.allgather(np.array([[counts[k] for k in sorted(counts)]], dtype=np.int64))
    if rank == 0:
        summary = {k: [int(v) for v in totals[:, i]] for i, k in enumerate(sorted(counts))}
        with open(os.path.join(args.run_dir, 'summary.json'), 'w') as f:
            json.dump(summary, f)
        print('soak: done, %s' % summary, flush=True)
    rf.shutdown()


# ---------------------------------------------------------------------------------------------
# Driver: launch, sample, judge, plot.
# ---------------------------------------------------------------------------------------------

def _proc_sample(pid):
    try:
        rss = threads = None
        with open('/proc/%d/status' % pid) as f:
            for line in f:
                if line.startswith('VmRSS:'):
                    rss = int(line.split()[1])
                elif line.startswith('Threads:'):
                    threads = int(line.split()[1])
        fds = len(os.listdir('/proc/%d/fd' % pid))
        with open('/proc/%d/stat' % pid) as f:
            fields = f.read().rsplit(')', 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
        return rss, fds, threads, cpu
    except (OSError, ValueError, IndexError):
        return None


def sampler(stop, run_dir, np_, launcher_pid, t0, interval, rows, out):
    """Appends to `rows` and writes each row to the csv writer `out` at once (a run cut short
    keeps its samples)."""
    while not stop.wait(interval if rows else 1.0):
        who = [('launcher', launcher_pid, None)]
        for r in range(np_):
            try:
                with open(os.path.join(run_dir, 'rank%d.pid' % r)) as f:
                    who.append(('rank%d' % r, int(f.read()), os.path.join(run_dir, 'rank%d.heap' % r)))
            except (OSError, ValueError):
                pass
        now = time.time() - t0
        for name, pid, heap_file in who:
            s = _proc_sample(pid)
            heap = ''
            if heap_file:
                try:
                    with open(heap_file) as f:
                        heap = int(f.read())
                except (OSError, ValueError):
                    pass
            if s and s[0] is not None:
                rows.append((round(now, 1), name, pid) + s + (heap,))
                out.writerow(rows[-1])


def fit(points):
    """Least-squares slope of y on x; 0 for fewer than 2 points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    return 0.0 if sxx == 0 else sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


def floors(points, width):
    """The lowest value in each `width`-minute bucket, at the bucket's middle: what a process
    holds between operations, without the tensors in flight at the sample."""
    buckets = {}
    for t, v in points:
        buckets.setdefault(int(t // width), []).append(v)
    return [((k + 0.5) * width, min(v)) for k, v in sorted(buckets.items())]


def judge(rows, duration):
    """Per process, over the last 2/3 of the run: slopes (raw RSS, RSS floor, heap in use,
    descriptors) and whether it is flat."""
    start = duration / 3
    out = {}
    for who in sorted({r[1] for r in rows}):
        mine = [r for r in rows if r[1] == who and r[0] >= start]
        if len(mine) < 3:
            continue
        minutes = (mine[-1][0] - mine[0][0]) / 60
        width = max(minutes / 10, 0.25)   # about ten buckets over the window
        rss_slope = fit([(r[0] / 60, r[3]) for r in mine])            # KiB per minute
        floor_slope = fit(floors([(r[0] / 60, r[3]) for r in mine], width))
        heaps = [(r[0] / 60, r[7]) for r in mine if len(r) > 7 and r[7] != '']
        heap_slope = fit(floors(heaps, width)) if len(heaps) >= 3 else None
        fd_slope = fit([(r[0] / 60, r[4]) for r in mine])             # per minute
        mean_rss = sum(r[3] for r in mine) / len(mine)
        bound = max(4096, 0.02 * mean_rss)   # KiB over the window
        fd_growth = fd_slope * minutes
        # Descriptors go up and down with the process sets alive at the sample; a leak raises
        # both the floor and the ceiling, so compare the last quarter's with the first's.
        q = max(1, len(mine) // 4)
        first, last = [r[4] for r in mine[:q]], [r[4] for r in mine[-q:]]
        fd_flat = fd_growth < 1 or (max(last) <= max(first) and min(last) <= min(first))
        flat = floor_slope * minutes < bound and fd_flat and (heap_slope is None or heap_slope * minutes < bound)
        out[who] = {'samples': len(mine), 'minutes': minutes, 'rss_slope_kib_min': rss_slope,
                    'floor_slope_kib_min': floor_slope, 'heap_slope_kib_min': heap_slope,
                    'fd_slope_min': fd_slope, 'fd_growth': fd_growth, 'bound_kib': bound,
                    'mean_rss_kib': mean_rss, 'rss_first': mine[0][3], 'rss_last': mine[-1][3],
                    'heap_first': heaps[0][1] if heaps else None, 'heap_last': heaps[-1][1] if heaps else None,
                    'fd_min': min(r[4] for r in mine), 'fd_max': max(r[4] for r in mine),
                    'flat': flat}
    return out


COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#7f7f7f']


def svg_plot(rows, path, title, start_judge):
    """Two panels (RSS MiB, open descriptors) against minutes, one polyline per process."""
    width, height, left, right, top, gap, panel = 900, 620, 70, 130, 40, 60, 230
    names = sorted({r[1] for r in rows})
    tmax = max([r[0] for r in rows] + [1]) / 60
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="15">%s</text>' % (left, title)]
    for p, (col, label, scale) in enumerate([(3, 'RSS (MiB)', 1 / 1024), (4, 'open descriptors', 1)]):
        y0 = top + p * (panel + gap)
        vals = [r[col] * scale for r in rows]
        vmax = max(vals + [1]) * 1.1
        pw = width - left - right

        def X(t):
            return left + pw * t / tmax

        def Y(v):
            return y0 + panel - panel * v / vmax
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' %
                   (left, y0, pw, panel))
        jx = X(start_judge / 60)
        out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#f2f2f2"/>' %
                   (jx, y0, left + pw - jx, panel))
        for i in range(6):
            v = vmax * i / 5
            out.append('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>' % (left - 6, Y(v) + 4, v))
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' %
                       (left, left + pw, Y(v), Y(v)))
        for i in range(7):
            t = tmax * i / 6
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%.1f</text>' % (X(t), y0 + panel + 16, t))
        out.append('<text x="%d" y="%d" text-anchor="middle">minutes (shaded: the window judged)</text>'
                   % (left + pw / 2, y0 + panel + 32))
        out.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>' %
                   (y0 + panel / 2, y0 + panel / 2, label))
        for k, who in enumerate(names):
            pts = ' '.join('%.1f,%.1f' % (X(r[0] / 60), Y(r[col] * scale)) for r in rows if r[1] == who)
            color = COLORS[k % len(COLORS)]
            out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (color, pts))
            if p == 0:
                out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (width - right + 10, top + 14 + 16 * k,
                                                                     color, who))
    out.append('</svg>')
    with open(path, 'w') as f:
        f.write('\n'.join(out) + '\n')


def find_env(build):
    site = os.path.join(build, 'python-site')
    if not os.path.exists(os.path.join(site, 'bin', 'ringfoldrun')):
        sys.exit('soak: no installed package in %s; run scripts/python_package.sh (BUILD_DIR=%s)' %
                 (site, build))
    venv = subprocess.run(['bash', os.path.join(ROOT, 'scripts', 'pyenv.sh'),
                           os.path.join(ROOT, 'bindings', 'python', 'requirements-plain.txt')],
                          check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return site, os.path.join(venv, 'bin', 'python')


def cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or 'unknown CPU'


def driver(args):
    build = os.path.abspath(args.build)
    site, python = find_env(build)
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    run_dir = os.path.join(out_dir, '.soak-run-%d' % os.getpid())
    os.makedirs(run_dir)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    env = dict(os.environ, PYTHONPATH=site, PYTHONDONTWRITEBYTECODE='1',
               RINGFOLD_STALL_CHECK_TIME='30', RINGFOLD_STALL_SHUTDOWN_TIME='120')
    if not args.glibc_dynamic_mmap:
        env.setdefault('MALLOC_MMAP_THRESHOLD_', str(GLIBC_MMAP_THRESHOLD))
    cmd = [os.path.join(site, 'bin', 'ringfoldrun'), '-np', str(args.np), python, os.path.abspath(__file__),
           '--worker', '--run-dir', run_dir, '--minutes', str(args.minutes), '--seed', str(seed),
           '--cpu', str(args.cpu), '--max-bytes', str(args.max_bytes)] + \
        (['--fixed-names'] if args.fixed_names else []) + (['--no-sets'] if args.no_sets else [])
    command = 'python3 bench/soak/soak.py ' + ' '.join(a for a in sys.argv[1:])
    if 'MALLOC_MMAP_THRESHOLD_' in env:
        command = 'MALLOC_MMAP_THRESHOLD_=%s %s' % (env['MALLOC_MMAP_THRESHOLD_'], command)
    print('soak: %s (seed %d)' % (command, seed), flush=True)
    log_path = os.path.join(out_dir, 'soak.log')
    t0 = time.time()
    rows = []
    stop = threading.Event()
    with open(log_path, 'w') as log, open(os.path.join(out_dir, 'soak.csv'), 'w', newline='',
                                          buffering=1) as csv_file:
        writer = csv.writer(csv_file)
        writer.writerow(['elapsed_s', 'who', 'pid', 'rss_kib', 'fds', 'threads', 'cpu_s', 'heap_kib'])
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        th = threading.Thread(target=sampler, args=(stop, run_dir, args.np, proc.pid, t0,
                                                    args.interval, rows, writer), daemon=True)
        th.start()
        try:
            rc = proc.wait(timeout=args.minutes * 60 + 300)
        except subprocess.TimeoutExpired:
            proc.terminate()
            rc = proc.wait()
            print('soak: the job did not end within --minutes + 5 min; stopped', flush=True)
            rc = rc or 1
        stop.set()
        th.join()
    duration = time.time() - t0
    summary = {}
    try:
        with open(os.path.join(run_dir, 'summary.json')) as f:
            summary = json.load(f)
    except OSError:
        pass
    for name in os.listdir(run_dir):
        os.unlink(os.path.join(run_dir, name))
    os.rmdir(run_dir)
    when = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    ok = report(out_dir, rows, duration, rc, summary, '`%s` (seed %d)' % (command, seed), when, args.np,
                args.interval)
    if rc != 0:
        print('soak: the job failed; its output is in %s' % log_path)
    return 0 if ok else 1


def report(out_dir, rows, duration, rc, summary, command, when, np_, interval):
    """Writes soak.svg and soak.md from the samples; prints the verdict; True when flat."""
    verdicts = judge(rows, duration)
    flat = bool(verdicts) and all(v['flat'] for v in verdicts.values())
    machine = '%d vCPU (%s), %s' % (os.cpu_count(), cpu_model(), platform.platform())
    title = 'ringfold soak: %d ranks, %.0f min, %s' % (np_, duration / 60, when)
    svg_plot(rows, os.path.join(out_dir, 'soak.svg'), title, duration / 3)
    cpu_total = sum(max(r[6] for r in rows if r[1] == who) for who in {r[1] for r in rows}) if rows else 0
    lines = ['# Soak: %d ranks, %.1f minutes' % (np_, duration / 60), '',
             '%s, %s, on %s.' % (command, when, machine), '',
             'Job exit status: %d. Verified operations (per rank: %s): %s.' %
             (rc, ', '.join('rank %d' % i for i in range(np_)),
              '; '.join('%s %s' % (k, v) for k, v in sorted(summary.items())) or 'no summary (job failed)'),
             'CPU used by the ranks and the launcher together: %.0f s over %.0f s (%.2f cores).' %
             (cpu_total, duration, cpu_total / max(duration, 1)), '',
             'Samples every %g s in `soak.csv`; plot `soak.svg`. Slopes fitted over the last 2/3 of the run '
             '(from %.1f min):' % (interval, duration / 180), '',
             '| process | samples | RSS first -> last (MiB) | RSS slope (KiB/min) | RSS floor slope (KiB/min) '
             '| heap in use first -> last (MiB) | heap floor slope (KiB/min) | fds min..max | fd slope (/min) | flat |',
             '|---|---|---|---|---|---|---|---|---|---|']
    for who, v in sorted(verdicts.items()):
        heap = ('%.1f -> %.1f' % (v['heap_first'] / 1024, v['heap_last'] / 1024)) if v['heap_first'] is not None else '-'
        heap_slope = '%.1f' % v['heap_slope_kib_min'] if v['heap_slope_kib_min'] is not None else '-'
        lines.append('| %s | %d | %.1f -> %.1f | %.1f | %.1f | %s | %s | %d..%d | %.3f | %s |' %
                     (who, v['samples'], v['rss_first'] / 1024, v['rss_last'] / 1024, v['rss_slope_kib_min'],
                      v['floor_slope_kib_min'], heap, heap_slope, v['fd_min'], v['fd_max'], v['fd_slope_min'],
                      'yes' if v['flat'] else 'NO'))
    verdict = 'FLAT' if flat and rc == 0 else ('NOT FLAT' if rc == 0 else 'JOB FAILED (exit %d)' % rc)
    lines += ['', 'Verdict: **%s**. Flat: over the window, the fitted growth of the RSS floor (the lowest RSS '
              'of each tenth of the window: what a process holds between operations) and of the heap in use '
              '(glibc mallinfo2: allocated and not freed) stays under max(4 MiB, 2%% of the mean RSS), and '
              'descriptors grow by less than one (or the last quarter\'s lowest and highest counts are no '
              'higher than the first quarter\'s), for every process.' % verdict, '']
    with open(os.path.join(out_dir, 'soak.md'), 'w') as f:
        f.write('\n'.join(lines))
    print('\n'.join(lines))
    return flat and rc == 0


def rereport(args):
    """--report: the plot and verdict again from <out>/soak.csv and <out>/soak.log."""
    out_dir = os.path.abspath(args.out)
    rows = []
    with open(os.path.join(out_dir, 'soak.csv')) as f:
        for r in csv.DictReader(f):
            rows.append((float(r['elapsed_s']), r['who'], int(r['pid']), int(r['rss_kib']), int(r['fds']),
                         int(r['threads']), float(r['cpu_s']),
                         int(r['heap_kib']) if r.get('heap_kib') else ''))
    summary, rc, command = {}, 1, '`python3 bench/soak/soak.py`'
    with open(os.path.join(out_dir, 'soak.log')) as f:
        for line in f:
            if 'soak: done, ' in line:
                summary, rc = ast.literal_eval(line.split('soak: done, ', 1)[1].strip()), 0
            if 'exited with status' in line or 'killed by signal' in line:
                rc = 1
    if args.command:
        command = args.command
    when = datetime.datetime.fromtimestamp(os.path.getmtime(os.path.join(out_dir, 'soak.csv')),
                                           datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    duration = max(r[0] for r in rows) if rows else 0
    return 0 if report(out_dir, rows, duration, rc, summary, command, when,
                       len({r[1] for r in rows if r[1].startswith('rank')}), args.interval) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--minutes', type=float, default=30)
    p.add_argument('--np', type=int, default=4)
    p.add_argument('--interval', type=float, default=5, help='seconds between samples')
    p.add_argument('--seed', type=int)
    p.add_argument('--cpu', type=float, default=1.0, help='cores the whole job may use')
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results'))
    p.add_argument('--build', default=os.environ.get('BUILD_DIR', os.path.join(ROOT, 'build')))
    p.add_argument('--max-bytes', type=int, default=MAX_BYTES, help='largest tensor (narrowing)')
    p.add_argument('--fixed-names', action='store_true', help='reuse 50 names (narrowing)')
    p.add_argument('--no-sets', action='store_true', help='global process set only (narrowing)')
    p.add_argument('--glibc-dynamic-mmap', action='store_true',
                   help="keep glibc's dynamic mmap threshold in the ranks (see GLIBC_MMAP_THRESHOLD)")
    p.add_argument('--report', action='store_true',
                   help='only write soak.md and soak.svg again from <out>/soak.csv and soak.log')
    p.add_argument('--command', help='with --report: the command line to cite')
    p.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    p.add_argument('--run-dir', help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    if args.report:
        return rereport(args)
    return driver(args)


if __name__ == '__main__':
    sys.exit(main())
