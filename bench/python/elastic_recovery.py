#!/usr/bin/env python3
"""Time from a worker's death to training resumed on the survivors, with ringfold.torch.elastic
under ringfoldrun's elastic mode (issue 23's figure; the goal: about 1 s for a process that
exits, under RINGFOLD_TIMEOUT + 2 s for a frozen one).

    PYTHONPATH=$SITE $V/bin/python bench/python/elastic_recovery.py --np 3 4 --repeats 3 \\
        --out bench/results/python_elastic.md

Each run is one elastic job of tests/python/elastic_worker.py's `train` mode (Horovod's loop:
TorchState with a model, a DistributedOptimizer and an ElasticSampler; a commit every 2 steps),
N workers on N emulated hosts (127.0.0.1 ... 127.0.0.N, one slot each, all local), --min-np N-1.
The worker of rank N-1 kills itself before step 5: `kill` sends itself SIGKILL (an exited
process: its peers see the connection close), `stop` SIGSTOP (a frozen process: its peers notice
only after RINGFOLD_TIMEOUT, ringfoldrun SIGKILLs it after its own bounded wait). Times come from
the workers' logs (wall clock, one machine):
  death    the victim's last log line, written just before it signals itself
  reset    a survivor's reset callback: the engine of the next incarnation is up (after
           shutdown, the ready key, ringfoldrun's new table, init)
  resumed  a survivor's first line in the next incarnation's training function: the state was
           restored from the last commit and broadcast from the new rank 0; training goes on
The figure is the slowest survivor's; the table gives the median (and max) over --repeats.

ringfoldrun is --ringfoldrun, else $RINGFOLDRUN, else $BUILD_DIR/ringfoldrun (BUILD_DIR
defaulting to build/); ringfold's package comes from PYTHONPATH as for any program.
"""
import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, 'tests', 'python', 'elastic_worker.py')


def parse_logs(directory):
    logs = {}
    for name in os.listdir(directory):
        if name.startswith('log.'):
            with open(os.path.join(directory, name)) as f:
                logs[name] = [(line.split()[0], dict(kv.split('=', 1) for kv in line.split()[1:])) for line in f]
    return logs


def one_run(ringfoldrun, np_, fault, timeout, deadline):
    directory = tempfile.mkdtemp(prefix='ringfold-elastic-bench-')
    try:
        hosts = os.path.join(directory, 'hosts')
        with open(hosts, 'w') as f:
            f.write(''.join('127.0.0.%d:1\n' % (i + 1) for i in range(np_)))
        script = os.path.join(directory, 'discover.sh')
        with open(script, 'w') as f:
            f.write('#!/bin/sh\ncat %s\n' % hosts)
        os.chmod(script, 0o755)
        kill = '1:%d:5%s' % (np_ - 1, ':STOP' if fault == 'stop' else '')
        argv = [ringfoldrun, '-np', str(np_), '--min-np', str(np_ - 1), '--host-discovery-script', script,
                '-x', 'RINGFOLD_TIMEOUT=%g' % timeout, '-x', 'ELASTIC_KILL=' + kill, '-x', 'ELASTIC_EPOCHS=1',
                sys.executable, WORKER, 'train', directory]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=deadline, start_new_session=True)
        if proc.returncode != 0:
            raise RuntimeError('job failed (exit %d):\n%s\n%s' % (proc.returncode, proc.stdout[-3000:],
                                                                   proc.stderr[-3000:]))
        logs = parse_logs(directory)
        death = [float(f['t']) for evs in logs.values() for e, f in evs if e == 'suicide']
        reset = [float(f['t']) for evs in logs.values() for e, f in evs if e == 'reset' and f['inc'] == '2']
        resumed = [float(f['t']) for evs in logs.values() for e, f in evs if e == 'sync' and f['inc'] == '2']
        if len(death) != 1 or len(resumed) != np_ - 1 or len(reset) != np_ - 1:
            raise RuntimeError('unexpected logs: death %s, reset %s, resumed %s' % (death, reset, resumed))
        return max(reset) - death[0], max(resumed) - death[0]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--np', type=int, nargs='+', default=[3, 4])
    p.add_argument('--faults', nargs='+', default=['kill', 'stop'], choices=['kill', 'stop'])
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--timeout', type=float, default=5.0, help='RINGFOLD_TIMEOUT of the jobs (s)')
    p.add_argument('--ringfoldrun', default=None)
    p.add_argument('--deadline', type=float, default=240.0, help='seconds before a job is abandoned')
    p.add_argument('--out', default=None, help='also write the report to this file')
    args = p.parse_args()
    build = os.environ.get('BUILD_DIR') or os.path.join(ROOT, 'build')
    ringfoldrun = args.ringfoldrun or os.environ.get('RINGFOLDRUN') or os.path.join(build, 'ringfoldrun')

    rows = []
    for np_ in args.np:
        for fault in args.faults:
            resets, resumes = [], []
            for r in range(args.repeats):
                reset, resumed = one_run(ringfoldrun, np_, fault, args.timeout, args.deadline)
                resets.append(reset)
                resumes.append(resumed)
                print('np %d %s run %d: reset after %.2f s, resumed after %.2f s' % (np_, fault, r + 1, reset, resumed),
                      file=sys.stderr, flush=True)
            rows.append((np_, fault, resets, resumes))

    lines = ['| ranks | fault | engine re-initialized after (median) | training resumed after (median) | max | runs |',
             '|---|---|---|---|---|---|']
    for np_, fault, resets, resumes in rows:
        lines.append('| %d -> %d | %s | %.2f s | %.2f s | %.2f s | %d |' % (
            np_, np_ - 1, 'SIGKILL (exited)' if fault == 'kill' else 'SIGSTOP (frozen)', statistics.median(resets),
            statistics.median(resumes), max(resumes), len(resumes)))
    report = '\n'.join(lines)
    header = ('Machine: %s, %d CPUs, load average %.1f at the end, Python %s; RINGFOLD_TIMEOUT=%g s; %s;\n'
              'ringfoldrun %s\n\n```\n%s\n```\n\n'
              % (platform.platform(), os.cpu_count(), os.getloadavg()[0], platform.python_version(), args.timeout,
                 time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), ringfoldrun,
                 'PYTHONPATH=$SITE $V/bin/python bench/python/elastic_recovery.py ' + ' '.join(sys.argv[1:])))
    print(header + report)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(RESULT_PREAMBLE + header + report + '\n' + RESULT_NOTES)


RESULT_PREAMBLE = '''# Elastic training: time from a worker's death to training resumed

`bench/python/elastic_recovery.py` (see its docstring): ringfold.torch.elastic under
`ringfoldrun --host-discovery-script`, N workers on N emulated hosts of one machine, the worker of
rank N-1 killed (SIGKILL) or frozen (SIGSTOP) before step 5 of Horovod's elastic loop; the
figures are the slowest survivor's, from the death to (a) the engine of the next incarnation
initialized, (b) the state restored from the last commit, broadcast from the new rank 0, and
training going on. Issue 23's goal: about 1 s for an exited process, under RINGFOLD_TIMEOUT + 2 s
for a frozen one.

'''

RESULT_NOTES = '''
Where the time goes (from the workers' logs):
- SIGKILL: the survivors' next collective fails at once (the connection closes); each shuts its
  engine down, sets its ready key, and polls `elastic/current` (every 20 ms); ringfoldrun polls
  the ready keys (every 100 ms), writes the next table, and the survivors initialize the new
  engine (connect, calibrate) and broadcast the state.
- SIGSTOP: the survivors notice after RINGFOLD_TIMEOUT (their collective waits that long on the
  silent peer); once they are all ready, ringfoldrun sees the last member stopped (a local process
  in state T) and SIGKILLs it at once, then publishes the next incarnation. A silent member it
  cannot see stopped (a hung or remote process) gets RINGFOLD_TIMEOUT + 5 s first.
'''


if __name__ == '__main__':
    main()
