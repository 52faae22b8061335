#!/usr/bin/env python3
"""Time from a fault to an error on every live rank: killed, frozen, cut-off and stalled ranks.

    sudo bench/fault/fault_timing.py [--ranks 4] [--trials 3] [--settings default,timeout5]
                                     [--faults kill,stop,cut,stall] [--out FILE.md]

Each rank runs in its own network namespace (an emulated host: scripts/netns_lib.sh, bridge
and veths, addresses 10.77.0.x inside namespaces this script makes and removes), started by hand
with RINGFOLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/STORE_ADDR/STORE_PORT/SECRET and no launcher, and allreduces 64 KiB in a
loop (fault_worker.py). Once every rank is steady, rank <victim> (the middle rank) is:

    kill   SIGKILLed                     (the process is gone: its sockets close)
    stop   SIGSTOPped                    (frozen: sockets open, nothing sent)
    cut    its host's link set down      (both processes alive, no packet passes)
    stall  told to stop submitting       (alive and talking, but submits no tensor)

and the script records, for every rank that is still running, the time from the fault to its
error (the stalled rank is then told to submit again, and its call must raise). Settings: `default` (no timeout variables set) and `timeout5` (RINGFOLD_TIMEOUT=5,
RINGFOLD_STALL_SHUTDOWN_TIME=5). A rank that has no error after --cap seconds counts as hung.
Prints a Markdown table (median and max over trials of the slowest rank) and each message.
Needs root, the build's python-site (scripts/python_package.sh) and the plain venv
(scripts/pyenv.sh bindings/python/requirements-plain.txt).
"""
import argparse
import os
import secrets
import select
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = 'rff'
SETTINGS = {
    'default': {},
    'timeout5': {'RINGFOLD_TIMEOUT': '5', 'RINGFOLD_STALL_SHUTDOWN_TIME': '5'},
}


def sh(script):
    subprocess.run(['bash', '-c', 'set -e; source %s/scripts/netns_lib.sh; %s' % (ROOT, script)],
                   check=True)


def cluster_up(n):
    cluster_down()
    cmds = ['netns_bridge %s' % PREFIX]
    cmds += ['netns_host %s %d %d 10.77.0.%d/24' % (PREFIX, i, i, i + 1) for i in range(n)]
    sh('; '.join(cmds))


def cluster_down():
    sh('netns_down %s "[0-9]+"' % PREFIX)


def start_ranks(n, python, site, env_extra, port, stall_rank):
    procs = []
    secret = secrets.token_hex(32)
    for r in range(n):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(('RINGFOLD_', 'HOROVOD_', 'OMPI_', 'SLURM_'))}
        env.update(PYTHONPATH=site, RINGFOLD_RANK=str(r), RINGFOLD_SIZE=str(n),
                   RINGFOLD_LOCAL_RANK='0', RINGFOLD_LOCAL_SIZE='1',
                   RINGFOLD_STORE_ADDR='10.77.0.1', RINGFOLD_STORE_PORT=str(port),
                   RINGFOLD_SECRET=secret, FAULT_STALL_RANK=str(stall_rank))
        env.update(env_extra)
        cmd = ['ip', 'netns', 'exec', '%s%d' % (PREFIX, r), python,
               os.path.join(ROOT, 'bench', 'fault', 'fault_worker.py')]
        procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, bufsize=1))
    return procs


def read_lines(procs, until, want):
    """Reads the ranks' output until want(lines_by_rank) or the deadline; returns the lines."""
    lines = {r: [] for r in range(len(procs))}
    fds = {p.stdout.fileno(): r for r, p in enumerate(procs)}
    open_fds = set(fds)
    while time.time() < until and open_fds and not want(lines):
        ready, _, _ = select.select(list(open_fds), [], [], 0.2)
        for fd in ready:
            line = procs[fds[fd]].stdout.readline()
            if not line:
                open_fds.discard(fd)
            else:
                lines[fds[fd]].append((time.time(), line.rstrip('\n')))
    return lines


def trial(n, fault, setting, python, site, cap, port):
    victim = n // 2
    cluster_up(n)
    procs = start_ranks(n, python, site, SETTINGS[setting], port,
                        victim if fault == 'stall' else -1)
    try:
        steady = read_lines(procs, time.time() + 60, lambda ls: all(
            any(t.startswith('STEADY') for _, t in ls[r]) for r in ls))
        if not all(any(t.startswith('STEADY') for _, t in steady[r]) for r in steady):
            raise RuntimeError('the job did not start:\n' + '\n'.join(
                '%d: %s' % (r, t) for r in steady for _, t in steady[r][-5:]))
        time.sleep(0.5)
        t0 = time.time()
        if fault == 'kill':
            procs[victim].send_signal(signal.SIGKILL)
        elif fault == 'stop':
            procs[victim].send_signal(signal.SIGSTOP)
        elif fault == 'cut':
            subprocess.run(['ip', '-n', '%s%d' % (PREFIX, victim), 'link', 'set',
                            '%sv%d' % (PREFIX, victim), 'down'], check=True)
        # stall: the victim has already stopped submitting after STEADY; t0 is ~0.5 s late.
        live = [r for r in range(n) if r != victim or fault == 'cut']
        lines = read_lines(procs, t0 + cap, lambda ls: all(
            any(t.startswith('ERROR') for _, t in ls[r]) for r in live))
        if fault == 'stall':    # the stalled rank submits again: its call must fail at once
            procs[victim].stdin.write('go\n')
            procs[victim].stdin.flush()
            live.append(victim)
            lines2 = read_lines(procs, time.time() + 30, lambda ls: any(
                t.startswith('ERROR') for _, t in ls[victim]))
            lines[victim] += lines2[victim]
        result = {}
        for r in live:
            err = [t for _, t in lines[r] if t.startswith('ERROR')]
            if err:
                _, _, when, text = err[0].split(' ', 3)
                result[r] = (float(when) - t0, text)
                if fault == 'stall' and r == victim:   # not a detection time: it slept till told
                    result[r] = (0.0, '(at its next call) ' + text)
            else:
                result[r] = (None, 'no error within %d s' % cap)
        return result
    finally:
        for p in procs:
            try:
                p.send_signal(signal.SIGCONT)
                p.kill()
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()
        cluster_down()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--ranks', type=int, default=4)
    ap.add_argument('--trials', type=int, default=3)
    ap.add_argument('--settings', default='default,timeout5')
    ap.add_argument('--faults', default='kill,stop,cut,stall')
    ap.add_argument('--cap', type=float, default=900, help='seconds before a rank counts as hung')
    ap.add_argument('--out', help='also write the Markdown report here')
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit('fault_timing.py: needs root (network namespaces)')
    site = os.path.join(os.environ.get('BUILD_DIR', os.path.join(ROOT, 'build')), 'python-site')
    venv = subprocess.run([os.path.join(ROOT, 'scripts', 'pyenv.sh'),
                           os.path.join(ROOT, 'bindings', 'python', 'requirements-plain.txt')],
                          check=True, capture_output=True, text=True).stdout.strip()
    python = os.path.join(venv, 'bin', 'python')
    report = ['| fault | settings | slowest rank\'s error after (median of %d) | max | hung |'
              % args.trials, '|---|---|---|---|---|']
    messages = []
    port = 29900
    for setting in args.settings.split(','):
        for fault in args.faults.split(','):
            slowest, hung, msgs = [], 0, None
            for _ in range(args.trials):
                port += 1
                res = trial(args.ranks, fault, setting, python, site, args.cap, port)
                times = [t for t, _ in res.values() if t is not None]
                hung += sum(1 for t, _ in res.values() if t is None)
                slowest.append(max(times) if len(times) == len(res) else float('inf'))
                msgs = res
                print('%s %s: %s' % (setting, fault, {r: round(t, 2) if t is not None else None
                                                      for r, (t, _) in res.items()}), flush=True)
            fin = [s for s in slowest if s != float('inf')]
            report.append('| %s | %s | %s | %s | %d |' % (
                fault, setting, '%.2f s' % statistics.median(slowest) if fin else '-',
                '%.2f s' % max(fin) if fin else '-', hung))
            messages.append('%s, %s:' % (fault, setting))
            messages += ['  rank %d: %s' % (r, text[:300]) for r, (_, text) in sorted(msgs.items())]
    out = '\n'.join(report) + '\n\nThe last trial\'s messages:\n\n```\n' + '\n'.join(messages) + '\n```\n'
    print(out)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(out)


if __name__ == '__main__':
    main()
