#!/usr/bin/env python3
"""What running a job through ringfold.spark costs against ringfoldrun (issue 23's Spark figures).

    SV=$(bash scripts/pyenv.sh bindings/python/requirements-spark.txt)
    PYTHONPATH=$SITE $SV/bin/python bench/python/spark_overhead.py --np 2 4 --repeats 3 \
        --ringfoldrun $SITE/bin/ringfoldrun --out bench/results/python_spark.md

For each rank count N it trains examples/pytorch_train.py (--epochs E, 1 torch thread per
rank) with N ranks, alternately through ringfold.spark.run on a local[max N] session (started
once, its start time reported apart) and under `ringfoldrun -np N`, the order swapped every
repeat so that drifting load hits both alike. Per run it records, on this machine's clock:
  * init: from the call (run() or the launcher's start) until the last rank returned from
    hvd.init() (every rank initialised); each rank takes the time right after its init;
  * total: from the call until it returned (the training included);
  * for Spark also when every task had started (run()'s verbose=2 report, measured from the
    job's submission).
It prints (and with --out writes) medians and the Spark/ringfoldrun ratios of the same repeat.
Figures, not a pass/fail test.
"""
import argparse
import contextlib
import io
import os
import platform
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launcher import ROOT, find_launcher  # noqa: E402

EXAMPLE = os.path.join(ROOT, 'examples', 'pytorch_train.py')


def train(argv):
    """One rank: init, note the time, then the example's own main (its init is a no-op now)."""
    import runpy
    import ringfold.torch as hvd
    hvd.init()
    t_init = time.time()
    print('INIT %.6f' % t_init, flush=True)
    sys.argv = [EXAMPLE] + argv
    runpy.run_path(EXAMPLE, run_name='__main__')
    return t_init


def spark_once(n, argv):
    """(init s, total s, tasks started s): the last from run()'s verbose=2 report."""
    import ringfold.spark
    out, said = io.StringIO(), io.StringIO()
    t0 = time.time()
    with contextlib.redirect_stdout(said):
        inits = ringfold.spark.run(train, args=(argv,), num_proc=n, stdout=out, start_timeout=300,
                                   verbose=2)
    t1 = time.time()
    assert 'final test accuracy' in out.getvalue(), out.getvalue()
    started = re.search(r'all \d+ tasks started ([0-9.]+) s', said.getvalue())
    return max(inits) - t0, t1 - t0, float(started.group(1)) if started else float('nan')


def ringfoldrun_once(launcher, n, argv):
    t0 = time.time()
    proc = subprocess.run([launcher, '-np', str(n), '--bind-to', 'none', sys.executable, os.path.abspath(__file__),
                           '--child'] + argv, capture_output=True, text=True, timeout=600)
    t1 = time.time()
    if proc.returncode != 0 or 'final test accuracy' not in proc.stdout:
        sys.exit('ringfoldrun failed:\n' + proc.stdout + proc.stderr)
    inits = [float(t) for t in re.findall(r'INIT ([0-9.]+)', proc.stdout)]
    assert len(inits) == n, proc.stdout
    return max(inits) - t0, t1 - t0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == '--child':
        train(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--np', type=int, nargs='+', default=[2, 4])
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--epochs', type=int, default=5)
    p.add_argument('--ringfoldrun', default=None)
    p.add_argument('--out', default=None, help='also write the markdown report here')
    args = p.parse_args()
    launcher = find_launcher(args.ringfoldrun)
    argv = ['--epochs', str(args.epochs), '--threads', '1']

    os.environ['PYSPARK_PYTHON'] = sys.executable
    os.environ['SPARK_LOCAL_IP'] = '127.0.0.1'
    from pyspark.sql import SparkSession
    t = time.time()
    spark = (SparkSession.builder.master('local[%d]' % max(args.np)).appName('ringfold-bench')
             .config('spark.driver.host', '127.0.0.1').config('spark.driver.bindAddress', '127.0.0.1')
             .config('spark.ui.enabled', 'false').config('spark.ui.showConsoleProgress', 'false')
             .getOrCreate())
    spark.sparkContext.setLogLevel('ERROR')
    session_s = time.time() - t
    spark_once(max(args.np), ['--epochs', '1'])  # warm: a first job starts Spark's Python workers

    rows = {}
    for n in args.np:
        runs = []
        for rep in range(args.repeats):
            order = ('spark', 'ringfoldrun') if rep % 2 == 0 else ('ringfoldrun', 'spark')
            got = {}
            for which in order:
                got[which] = spark_once(n, argv) if which == 'spark' else ringfoldrun_once(launcher, n, argv)
                print('np %d repeat %d %-11s init %.2f s  total %.2f s' % ((n, rep, which) + got[which][:2]),
                      flush=True)
            runs.append(got)
        rows[n] = runs
    spark.stop()

    def med(values):
        return statistics.median(values)

    load = os.getloadavg()
    lines = [
        '# ringfold.spark against ringfoldrun (issue 23)',
        '',
        'Machine: %s, %d CPUs, load average %.1f/%.1f/%.1f at the end; Python %s; pyspark %s on '
        'local[%d] (127.0.0.1, UI off). Training: `examples/pytorch_train.py --epochs %d --threads 1`.'
        % (platform.node() or 'this machine', os.cpu_count(), load[0], load[1], load[2],
           platform.python_version(), __import__('pyspark').__version__, max(args.np), args.epochs),
        '',
        'Command: `PYTHONPATH=$SITE $SV/bin/python bench/python/spark_overhead.py --np %s --repeats %d '
        '--epochs %d` (SV: the venv of requirements-spark.txt). Medians of %d repeats, the two '
        'launchers alternating; ratios are per repeat (Spark / ringfoldrun of the same repeat), '
        'then the median. The Spark session itself started in %.1f s (once per application, not '
        'counted below); one warm-up job at the largest size ran first, so Spark\'s Python workers '
        'exist (Spark reuses them). ringfoldrun runs with `--bind-to none`: Spark\'s ranks are not '
        'bound to cores either, so both jobs compete for the cores alike.'
        % (' '.join(map(str, args.np)), args.repeats, args.epochs, args.repeats, session_s),
        '',
        '| ranks | run() to every task started | run() to every rank initialised | ringfoldrun launch '
        'to every rank initialised | init overhead | total, ringfold.spark.run | total, ringfoldrun '
        '| overhead | ratio |',
        '|---|---|---|---|---|---|---|---|---|',
    ]
    for n, runs in rows.items():
        si, st = med([r['spark'][0] for r in runs]), med([r['spark'][1] for r in runs])
        ss = med([r['spark'][2] for r in runs])
        ri, rt = med([r['ringfoldrun'][0] for r in runs]), med([r['ringfoldrun'][1] for r in runs])
        init_over = med([r['spark'][0] - r['ringfoldrun'][0] for r in runs])
        over = med([r['spark'][1] - r['ringfoldrun'][1] for r in runs])
        ratio = med([r['spark'][1] / r['ringfoldrun'][1] for r in runs])
        lines.append('| %d | %.2f s | %.2f s | %.2f s | %+.2f s | %.2f s | %.2f s | %+.2f s | %.2f |'
                     % (n, ss, si, ri, init_over, st, rt, over, ratio))
    lines += ['', 'Every run (init s / total s):', '']
    for n, runs in rows.items():
        for rep, r in enumerate(runs):
            lines.append('- np %d repeat %d: spark %.2f / %.2f (tasks started %.2f), ringfoldrun %.2f / %.2f'
                         % (n, rep, r['spark'][0], r['spark'][1], r['spark'][2], r['ringfoldrun'][0],
                            r['ringfoldrun'][1]))
    report = '\n'.join(lines) + '\n'
    print(report)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(report)


if __name__ == '__main__':
    main()
