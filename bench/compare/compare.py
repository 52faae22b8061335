#!/usr/bin/env python3
"""Same-run allreduce comparison: ringfold vs Gloo vs Open MPI (float32 sum, TCP).

Loopback mode (default): for 2 and 4 ranks and sizes 4 KiB .. 64 MiB (x4 steps) runs
ringfold's all_reduce_perf, gloo_allreduce_perf (several Gloo algorithms) and mpi_allreduce_perf
(Open MPI with --mca btl tcp,self over lo), all over TCP, plus (--unix, the default) each
one's own same-host transport: ringfold over Unix sockets ('ringfold-unix', its default on one
host) and Open MPI over shared memory ('mpi-shm'). One launch per (ranks, size, system), the systems
interleaved in a rotating order per size and repeat so that machine noise hits all of them
alike. Each figure is the median over --repeats launches; per launch, the figure comes from the
shorter of the out-of-place and in-place times (busbw recomputed from the time column, which
keeps more digits than the busbw column). Prints a table of busbw (GB/s),
the ratios ringfold/Gloo and ringfold/MPI and the 4 KiB latency at 2 ranks, and writes a Markdown
report (--report).

Emulated-cluster mode (--netns N --rate R, root only): builds N network namespaces joined by a
bridge with every link shaped to R (netns_cluster.sh), measures single-link TCP goodput with
iperf3, runs ringfold (and Gloo) with one rank per namespace, and reports busbw against goodput.
The namespaces are always torn down, also on errors and signals.

Every child runs in its own session under a timeout and is killed with its process group when
it overruns. Traffic goes only to 127.0.0.1 or to the 10.88.0.x addresses inside the namespaces.

  bench/compare/compare.py --build build --report compare.md
  bench/compare/compare.py --build build --baseline ../base/build --only ringfold,base-ringfold
  sudo bench/compare/compare.py --build build --netns 4 --rate 1gbit --report netns.md
"""

import argparse
import datetime
import json
import os
import platform
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KIB = 1024
MIB = 1024 * 1024
LAUNCHER_ENV_PREFIXES = ("RINGFOLD_RANK", "RINGFOLD_SIZE", "RINGFOLD_LOCAL", "RINGFOLD_CROSS",
                         "RINGFOLD_STORE", "HOROVOD_", "OMPI_", "PMIX_", "SLURM_", "RANK",
                         "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                         "MASTER_PORT", "GROUP_RANK")


class RunError(RuntimeError):
    pass


def parse_size(text):
    text = text.strip().upper()
    units = {"K": KIB, "M": MIB, "G": 1024 * MIB}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def human(size):
    if size >= MIB and size % MIB == 0:
        return f"{size // MIB} MiB"
    if size >= KIB and size % KIB == 0:
        return f"{size // KIB} KiB"
    return f"{size} B"


# ringfoldrun prefixes every forwarded line with its rank, as horovodrun does.
RANK_PREFIX = re.compile(r"^\[\d+\]<stdout>:")


def parse_rows(text):
    """Rows of nccl-tests output: one dict per size line."""
    rows = []
    for line in (RANK_PREFIX.sub("", l) for l in text.splitlines()):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split()
        if len(f) < 13:
            continue
        try:
            rows.append({
                "size": int(f[0]), "count": int(f[1]), "type": f[2], "op": f[3],
                "oop_time": float(f[5]), "oop_busbw": float(f[7]), "oop_wrong": f[8],
                "ip_time": float(f[9]), "ip_busbw": float(f[11]), "ip_wrong": f[12],
            })
        except ValueError:
            continue
    return rows


def busbw(size, nranks, time_us):
    """nccl-tests' allreduce busbw in GB/s, from the time column (which keeps more digits than
    the busbw column for small sizes)."""
    if time_us <= 0:
        return float("nan")
    return 2.0 * (nranks - 1) / nranks * size / (time_us * 1e-6) / 1e9


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_ENV_PREFIXES)}
    env.update(extra or {})
    return env


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# Prepended to every launched command: ['chrt', '-f', '50'] with --realtime.
PREFIX = []


def run_one(cmd, env, timeout):
    """Runs cmd in its own session; returns stdout. Raises RunError on failure or timeout."""
    if PREFIX:
        # Real-time ranks that spin are throttled once they hold a core for 95% of a second
        # (sched_rt_runtime_us): back-to-back launches would meet that 50 ms stall at the same
        # point of each launch, in one size's short timed window. A pause keeps them under it.
        time.sleep(0.3)
    proc = subprocess.Popen(PREFIX + cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise RunError(f"timed out after {timeout}s: {' '.join(cmd)}")
    except BaseException:
        kill_group(proc)
        raise
    if proc.returncode != 0:
        raise RunError(f"exit {proc.returncode}: {' '.join(cmd)}\n{err[-2000:]}")
    return out


def run_many(cmds, timeout):
    """Starts every (cmd, env) at once (the ranks of one job); returns rank 0's stdout."""
    procs = []
    if PREFIX:
        time.sleep(0.3)  # as in run_one
    try:
        for cmd, env in cmds:
            procs.append(subprocess.Popen(PREFIX + cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        deadline = time.monotonic() + timeout
        outs = []
        for p in procs:
            left = max(0.1, deadline - time.monotonic())
            out, err = p.communicate(timeout=left)
            if p.returncode != 0:
                raise RunError(f"rank exited {p.returncode}: {' '.join(p.args)}\n{err[-2000:]}")
            outs.append(out)
        return outs[0]
    except subprocess.TimeoutExpired:
        raise RunError(f"timed out after {timeout}s: {' '.join(cmds[0][0])}")
    finally:
        for p in procs:
            if p.poll() is None:
                kill_group(p)


def iters_for(size):
    """Timed iterations: about 128 MiB moved per launch, between 5 and 200. nccl-tests reports
    the mean over the timed iterations, so a window of a few ms (16 iterations of 1 MiB) lets one
    preemption on a shared machine move a launch's figure by half; 128 at 1 MiB, 32 at 4 MiB."""
    return max(5, min(200, (128 * MIB) // max(size, 1)))


class Systems:
    """Command lines of the compared systems on loopback."""

    def __init__(self, args):
        self.args = args
        b = os.path.abspath(args.build)
        self.ringfoldrun = os.path.join(b, "ringfoldrun")
        self.bench = os.path.join(b, "bench")
        self.names = []
        self.binds = [x for x in args.bind.split(",") if x]
        for x in self.binds:
            if x not in ("auto", "none"):
                sys.exit(f"--bind: '{x}' is not auto or none")
        if os.access(os.path.join(self.bench, "all_reduce_perf"), os.X_OK) and \
                os.access(self.ringfoldrun, os.X_OK):
            self.names.append("ringfold")
            if "none" in self.binds:
                self.names.append("ringfold-unbound")
            if args.unix:
                self.names.append("ringfold-unix")
            if args.shm:
                # ringfold's default on one host: shared memory, every message through the rings,
                # and the same with cross-memory attach for large messages (RINGFOLD_SHM_CMA=on).
                self.names += ["ringfold-shm", "ringfold-shm-cma"]
            if args.rdma:
                self.names.append("ringfold-rdma")
        else:
            print(f"# ringfold skipped: {self.bench}/all_reduce_perf or {self.ringfoldrun} missing")
        if os.access(os.path.join(self.bench, "gloo_allreduce_perf"), os.X_OK):
            for a in filter(None, args.gloo_algorithms.split(",")):
                self.names += [f"gloo-{a}" + ("-bound" if b == "auto" else "") for b in self.binds]
        else:
            print("# Gloo skipped: gloo_allreduce_perf was not built (libgloo-dev missing?)")
        if os.access(os.path.join(self.bench, "mpi_allreduce_perf"), os.X_OK) and \
                shutil.which("mpirun"):
            self.names.append("mpi")
            if args.unix:
                self.names.append("mpi-shm")
        else:
            print("# Open MPI skipped: mpi_allreduce_perf or mpirun missing")
        # --baseline: the same ringfold systems from another build ('base-' names), interleaved
        # with this build's in one run, so a change is measured against its parent side by side.
        self.base = os.path.abspath(args.baseline) if args.baseline else None
        if self.base:
            for x in ("ringfoldrun", os.path.join("bench", "all_reduce_perf")):
                if not os.access(os.path.join(self.base, x), os.X_OK):
                    sys.exit(f"--baseline: {os.path.join(self.base, x)} is missing or not executable")
            self.names += ["base-" + x for x in self.names if x.startswith("ringfold")]
        if args.only:
            keep = set(args.only.split(","))
            self.names = [n for n in self.names if n in keep]

    def common(self, size):
        a = self.args
        return ["-b", str(size), "-e", str(size), "-n", str(a.iters or iters_for(size)),
                "-w", str(a.warmup), "-c", "1" if a.check else "0", "-T", str(a.op_timeout)]

    def measure(self, name, nranks, size):
        args = self.common(size)
        if name.startswith(("ringfold", "base-ringfold")):
            # The comparison is over TCP, as for Gloo and Open MPI: ringfold's default on one host
            # (Unix sockets between local ranks) is the separate 'ringfold-unix' system.
            base = name.startswith("base-")
            # ringfold-rdma: the rdma transport between every pair, over libfabric's tcp;ofi_rxm.
            local = "unix" if name.endswith("ringfold-unix") else "rdma" if name.endswith("ringfold-rdma") else \
                "shm" if "ringfold-shm" in name else "tcp"
            env = {"RINGFOLD_SOCKET_IFNAME": "lo", "RINGFOLD_LOCAL_TRANSPORT": local}
            if name.endswith("ringfold-shm-cma"):
                env["RINGFOLD_SHM_CMA"] = "on"
            if local == "rdma":
                env.update({"RINGFOLD_TRANSPORT": "rdma", "RINGFOLD_RDMA_FABRIC": "ofi",
                            "RINGFOLD_OFI_PROVIDER": self.args.ofi_provider, "FI_TCP_IFACE": "lo"})
            launcher = os.path.join(self.base, "ringfoldrun") if base else self.ringfoldrun
            bench = os.path.join(self.base, "bench") if base else self.bench
            cmd = [launcher, "-np", str(nranks), "--bind-to", "none" if name.endswith("unbound") else "auto",
                   os.path.join(bench, "all_reduce_perf")] + args
            return run_one(cmd, clean_env(env), self.args.timeout)
        if name.startswith("gloo-"):
            store = tempfile.mkdtemp(prefix="rf_gloo_store.")
            try:
                algo = name[len("gloo-"):]
                bind = "auto" if algo.endswith("-bound") else "none"
                prog = [os.path.join(self.bench, "gloo_allreduce_perf"), "--store-dir", store,
                        "-A", algo[:-len("-bound")] if bind == "auto" else algo] + args
                if os.access(self.ringfoldrun, os.X_OK):
                    return run_one([self.ringfoldrun, "-np", str(nranks), "--bind-to", bind] + prog, clean_env(),
                                   self.args.timeout)
                # Without ringfoldrun, start the ranks here.
                return run_many([(prog + ["--rank", str(r), "--size", str(nranks)], clean_env())
                                 for r in range(nranks)], self.args.timeout)
            finally:
                shutil.rmtree(store, ignore_errors=True)
        if name in ("mpi", "mpi-shm"):
            # mpi-shm: Open MPI's own same-host transport (shared memory), the counterpart of
            # ringfold-unix.
            btl = ["--mca", "btl", "vader,self"] if name == "mpi-shm" else \
                ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe"] + btl + ["-np", str(nranks),
                   os.path.join(self.bench, "mpi_allreduce_perf")] + args
            return run_one(cmd, clean_env(), self.args.timeout)
        raise ValueError(name)


def median(values):
    return statistics.median(values) if values else float("nan")


def fmt(v, digits=3):
    return "-" if v != v else f"{v:.{digits}f}"


def ratio(a, b):
    return a / b if b and b == b and a == a else float("nan")


def loopback(args):
    systems = Systems(args)
    if not systems.names:
        raise SystemExit("nothing to compare: build the bench targets first")
    ranks = [int(r) for r in args.ranks.split(",")]
    sizes = []
    s = parse_size(args.min_bytes)
    while s <= parse_size(args.max_bytes):
        sizes.append(s)
        s *= 4
    bw = {}    # (system, nranks, size) -> [busbw]
    lat = {}   # (system, nranks, size) -> [us]
    failures = []
    started = time.monotonic()
    for n in ranks:
        for size in sizes:
            for rep in range(args.repeats):
                order = systems.names[rep % len(systems.names):] + \
                    systems.names[:rep % len(systems.names)]
                for name in order:
                    try:
                        rows = parse_rows(systems.measure(name, n, size))
                    except RunError as e:
                        failures.append(f"{name} n={n} {human(size)}: {e}")
                        print(f"# FAILED {name} n={n} {human(size)}: {str(e).splitlines()[0]}",
                              flush=True)
                        continue
                    for row in rows:
                        if args.check and (row["oop_wrong"] != "0" or row["ip_wrong"] != "0"):
                            failures.append(f"{name} n={n} {human(size)}: #wrong "
                                            f"{row['oop_wrong']}/{row['ip_wrong']}")
                        key = (name, n, row["size"])
                        t = min(row["oop_time"], row["ip_time"])
                        bw.setdefault(key, []).append(busbw(row["size"], n, t))
                        lat.setdefault(key, []).append(t)
            print(f"# n={n} {human(size)} done ({time.monotonic() - started:.0f}s)", flush=True)

    gloo_names = [x for x in systems.names if x.startswith("gloo-")]
    lines = []
    lines.append("# ringfold vs Gloo vs Open MPI: allreduce, float32 sum, TCP over loopback")
    lines.append("")
    lines.append(environment_text(args))
    lines.append("")
    lines.append(f"busbw in GB/s (nccl-tests definition, 2(n-1)/n x bytes / time), median of "
                 f"{args.repeats} launches; each launch's figure comes from the shorter of its "
                 f"out-of-place and in-place times. 'Gloo best' is the best Gloo algorithm at "
                 f"that size, bound or not. Ratios > 1 mean ringfold is faster. ringfold and Gloo "
                 f"are started by ringfoldrun: 'ringfold' and '-bound' names ran with its default "
                 f"--bind-to auto (ranks bound to the cores when they outnumber them, or fill "
                 f"them and use shared memory, else unbound), '-unbound' and the other Gloo names with --bind-to none. "
                 f"Open MPI ran with mpirun's own default binding. Every system runs over TCP on "
                 f"127.0.0.1 (ringfold with RINGFOLD_LOCAL_TRANSPORT=tcp) except 'ringfold-unix' "
                 f"(Unix-domain sockets between the ranks), 'ringfold-shm', ringfold's default on one "
                 f"host (shared-memory rings: copied in by the sender, copied out or folded straight from the ring by the "
                 f"receiver, pipelined), 'ringfold-shm-cma' "
                 f"(the same with RINGFOLD_SHM_CMA=on: large messages by cross-memory attach), "
                 f"'mpi-shm', Open MPI's (shared memory: --mca btl vader,self), and 'ringfold-rdma' "
                 f"(ringfold's rdma transport between every pair, libfabric {args.ofi_provider})." +
                 (" Every launch ran under chrt -f 50 (SCHED_FIFO): the machine was shared with other work."
                  if args.realtime else ""))
    for n in ranks:
        lines.append("")
        lines.append(f"## {n} ranks")
        lines.append("")
        head = ["size"] + systems.names
        if gloo_names:
            head.append("Gloo best")
        if "ringfold" in systems.names and gloo_names:
            head.append("ringfold/Gloo best")
            if "gloo-ring" in gloo_names:
                head.append("ringfold/Gloo ring")
        if "ringfold" in systems.names and "mpi" in systems.names:
            head.append("ringfold/MPI")
        if "ringfold-unix" in systems.names and gloo_names:
            head.append("unix/Gloo best")
        if "ringfold-unix" in systems.names and "mpi" in systems.names:
            head.append("unix/MPI")
        if "ringfold-unix" in systems.names and "mpi-shm" in systems.names:
            head.append("unix/MPI shm")
        for x in ("ringfold-shm", "ringfold-shm-cma"):
            if x in systems.names and "mpi-shm" in systems.names:
                head.append(x[len("ringfold-"):] + "/MPI shm")
        if "ringfold-rdma" in systems.names and "ringfold" in systems.names:
            head.append("rdma/TCP")
        base_pairs = [x for x in systems.names if "base-" + x in systems.names]
        head += [f"{x}/base" for x in base_pairs]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for size in sizes:
            med = {name: median(bw.get((name, n, size), [])) for name in systems.names}
            cells = [human(size)] + [fmt(med[name]) for name in systems.names]
            best = max((med[g] for g in gloo_names if med[g] == med[g]), default=float("nan"))
            if gloo_names:
                cells.append(fmt(best))
            if "ringfold" in systems.names and gloo_names:
                cells.append(fmt(ratio(med["ringfold"], best), 2))
                if "gloo-ring" in gloo_names:
                    cells.append(fmt(ratio(med["ringfold"], med["gloo-ring"]), 2))
            if "ringfold" in systems.names and "mpi" in systems.names:
                cells.append(fmt(ratio(med["ringfold"], med["mpi"]), 2))
            if "ringfold-unix" in systems.names and gloo_names:
                cells.append(fmt(ratio(med["ringfold-unix"], best), 2))
            if "ringfold-unix" in systems.names and "mpi" in systems.names:
                cells.append(fmt(ratio(med["ringfold-unix"], med["mpi"]), 2))
            if "ringfold-unix" in systems.names and "mpi-shm" in systems.names:
                cells.append(fmt(ratio(med["ringfold-unix"], med["mpi-shm"]), 2))
            for x in ("ringfold-shm", "ringfold-shm-cma"):
                if x in systems.names and "mpi-shm" in systems.names:
                    cells.append(fmt(ratio(med[x], med["mpi-shm"]), 2))
            if "ringfold-rdma" in systems.names and "ringfold" in systems.names:
                cells.append(fmt(ratio(med["ringfold-rdma"], med["ringfold"]), 2))
            cells += [fmt(ratio(med[x], med["base-" + x]), 2) for x in base_pairs]
            lines.append("| " + " | ".join(cells) + " |")
    small = sizes[0]
    if 2 in ranks:
        lines.append("")
        lines.append(f"## Latency: {human(small)} allreduce at 2 ranks (us, median; smaller of "
                     f"out-of-place / in-place)")
        lines.append("")
        lines.append("| " + " | ".join(systems.names) + " |")
        lines.append("|" + "---|" * len(systems.names))
        lines.append("| " + " | ".join(fmt(median(lat.get((name, 2, small), [])), 1)
                                       for name in systems.names) + " |")
    if failures:
        lines.append("")
        lines.append("## Failures")
        lines.append("")
        lines += [f"- {f.splitlines()[0]}" for f in failures]
    lines.append("")
    lines.append(f"Total time: {time.monotonic() - started:.0f} s.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.report:
        with open(args.report, "w") as fh:
            fh.write(text)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"busbw": {f"{k[0]}|{k[1]}|{k[2]}": v for k, v in bw.items()},
                       "time_us": {f"{k[0]}|{k[1]}|{k[2]}": v for k, v in lat.items()},
                       "failures": failures}, fh, indent=1)
    return 1 if failures else 0


def environment_text(args):
    commit = "unknown"
    try:
        commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip() or commit
    except (OSError, subprocess.TimeoutExpired):
        pass
    return (f"Host: {platform.node()}, {os.cpu_count()} CPUs, Linux {platform.release()}; "
            f"commit {commit}; {datetime.datetime.now().isoformat(timespec='seconds')}.\n"
            f"Command: `{' '.join(sys.argv)}`")


class NetnsCluster:
    """netns_cluster.sh up/down with a guaranteed teardown (context manager + signals)."""

    def __init__(self, n, rate, delay, prefix):
        self.n, self.rate, self.delay, self.prefix = n, rate, delay, prefix
        self.script = os.path.join(HERE, "netns_cluster.sh")
        # The delay emulators (rf_netdelay) exit with this process, even on SIGKILL.
        self.env = dict(os.environ, RF_NETNS_PREFIX=prefix, RF_NETNS_OWNER_PID=str(os.getpid()))
        self.old = {}

    def _script(self, *a):
        subprocess.run([self.script, *a], env=self.env, check=True, timeout=120)

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self.old[sig] = signal.signal(sig, self._on_signal)
        args = ["up", str(self.n), self.rate] + ([self.delay] if self.delay else [])
        self._script(*args)
        return self

    def _on_signal(self, signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc):
        try:
            self._script("down")
        finally:
            for sig, old in self.old.items():
                signal.signal(sig, old)
        return False

    def ns(self, i):
        return f"{self.prefix}{i}"

    def addr(self, i):
        return f"10.88.0.{1 + i}"


def iperf_goodput(cluster, seconds):
    """Single-link TCP goodput host 0 -> host 1, in GB/s (decimal, as busbw)."""
    server = subprocess.Popen(["ip", "netns", "exec", cluster.ns(1), "iperf3", "-s", "-1",
                               "-B", cluster.addr(1), "-p", "5201"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        time.sleep(0.5)
        out = run_one(["ip", "netns", "exec", cluster.ns(0), "iperf3", "-c", cluster.addr(1),
                       "-B", cluster.addr(0), "-p", "5201", "-t", str(seconds), "-J"],
                      None, seconds + 30)
        bps = json.loads(out)["end"]["sum_received"]["bits_per_second"]
        return bps / 8 / 1e9
    finally:
        if server.poll() is None:
            kill_group(server)


def netns(args):
    if os.geteuid() != 0:
        raise SystemExit("--netns needs root (network namespaces and tc)")
    if not shutil.which("iperf3"):
        raise SystemExit("--netns needs iperf3 for the goodput reference")
    bench = os.path.join(os.path.abspath(args.build), "bench")
    n = args.netns
    flags = ["-b", args.netns_min_bytes, "-e", args.netns_max_bytes, "-f", "4",
             "-n", str(args.iters or 3), "-w", "1", "-c", "1", "-T", str(args.op_timeout)]
    results = {}
    failures = []
    stores = []
    started = time.monotonic()
    try:
        return netns_run(args, bench, n, flags, results, failures, stores, started)
    finally:
        for store in stores:
            shutil.rmtree(store, ignore_errors=True)


def netns_run(args, bench, n, flags, results, failures, stores, started):
    with NetnsCluster(n, args.rate, args.delay, args.netns_prefix) as cluster:
        goodput = iperf_goodput(cluster, 3)
        print(f"# goodput {cluster.ns(0)} -> {cluster.ns(1)}: {goodput:.4f} GB/s", flush=True)
        secret = secrets.token_hex(16)
        jobs = {}
        if os.access(os.path.join(bench, "all_reduce_perf"), os.X_OK):
            cmds = []
            for i in range(n):
                env = clean_env({"RANK": str(i), "WORLD_SIZE": str(n), "LOCAL_RANK": "0",
                                 "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": cluster.addr(0),
                                 "MASTER_PORT": "29500", "RINGFOLD_SECRET": secret,
                                 "RINGFOLD_SOCKET_IFNAME": f"{cluster.prefix}v{i}"})
                cmds.append((["ip", "netns", "exec", cluster.ns(i),
                              os.path.join(bench, "all_reduce_perf")] + flags, env))
            jobs["ringfold"] = cmds
        if os.access(os.path.join(bench, "gloo_allreduce_perf"), os.X_OK):
            for algo in args.gloo_algorithms.split(","):
                store = tempfile.mkdtemp(prefix="rf_gloo_store.")
                stores.append(store)
                jobs[f"gloo-{algo}"] = [(["ip", "netns", "exec", cluster.ns(i),
                                          os.path.join(bench, "gloo_allreduce_perf"),
                                          "--rank", str(i), "--size", str(n), "--hostname",
                                          cluster.addr(i), "--store-dir", store, "-A", algo] + flags,
                                         clean_env()) for i in range(n)]
        for name, cmds in jobs.items():
            try:
                out = run_many(cmds, args.timeout)
                for row in parse_rows(out):
                    if row["oop_wrong"] != "0" or row["ip_wrong"] != "0":
                        failures.append(f"{name} {human(row['size'])}: #wrong "
                                        f"{row['oop_wrong']}/{row['ip_wrong']}")
                    results[(name, row["size"])] = busbw(row["size"], n,
                                                         min(row["oop_time"], row["ip_time"]))
            except RunError as e:
                failures.append(f"{name}: {e}")
                print(f"# FAILED {name}: {str(e).splitlines()[0]}", flush=True)
            print(f"# {name} done ({time.monotonic() - started:.0f}s)", flush=True)
        goodput_after = iperf_goodput(cluster, 3)

    names = list(jobs)
    sizes = sorted({k[1] for k in results})
    lines = [f"# Emulated cluster: {n} hosts (network namespaces), links shaped to {args.rate}"
             + (f", delay {args.delay}" if args.delay else ""), "", environment_text(args), "",
             f"Single-link TCP goodput (iperf3, 3 s): {goodput:.4f} GB/s before the runs, "
             f"{goodput_after:.4f} GB/s after. busbw from the shorter of out-of-place / in-place; "
             f"% is busbw / goodput (target for ringfold: >= 95% from 16 MiB up).", "",
             "| size | " + " | ".join(f"{x} busbw | {x} %" for x in names) + " |",
             "|---|" + "---|---|" * len(names)]
    ref = max(goodput, goodput_after)
    for size in sizes:
        cells = [human(size)]
        for name in names:
            v = results.get((name, size), float("nan"))
            cells += [fmt(v, 4), fmt(100 * v / ref, 1)]
        lines.append("| " + " | ".join(cells) + " |")
    if failures:
        lines += ["", "## Failures", ""] + [f"- {f.splitlines()[0]}" for f in failures]
    lines += ["", f"Total time: {time.monotonic() - started:.0f} s."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.report:
        with open(args.report, "w") as fh:
            fh.write(text)
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="build directory (holds ringfoldrun, bench/)")
    p.add_argument("--report", help="write the Markdown report here")
    p.add_argument("--baseline", help="another build directory (e.g. of the parent commit): its ringfold "
                                      "systems run interleaved as 'base-ringfold...', with a ratio column each")
    p.add_argument("--json", help="write the raw measurements here (loopback mode)")
    p.add_argument("--ranks", default="2,4", help="rank counts (loopback mode)")
    p.add_argument("--min-bytes", default="4K")
    p.add_argument("--max-bytes", default="64M")
    p.add_argument("--repeats", type=int, default=3, help="launches per measurement (median)")
    p.add_argument("--iters", type=int, default=0, help="timed iterations (default: by size)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--check", action="store_true", help="check results (-c 1) in timing runs too")
    p.add_argument("--unix", action=argparse.BooleanOptionalAction, default=True,
                   help="also run each system's own same-host transport: ringfold over Unix sockets "
                        "(its default on one host) as 'ringfold-unix', Open MPI over shared memory as 'mpi-shm'")
    p.add_argument("--shm", action=argparse.BooleanOptionalAction, default=True,
                   help="also run ringfold over shared memory between local ranks (its default on one host) "
                        "as 'ringfold-shm', and with cross-memory attach on as 'ringfold-shm-cma'")
    p.add_argument("--rdma", action=argparse.BooleanOptionalAction, default=False,
                   help="also run ringfold's rdma transport between every pair as 'ringfold-rdma' "
                        "(libfabric, --ofi-provider; on one host a functional path, see docs/rdma.md)")
    p.add_argument("--ofi-provider", default="tcp;ofi_rxm", help="libfabric provider of ringfold-rdma")
    p.add_argument("--only", default="", help="comma-separated system names to run (default: all found)")
    p.add_argument("--bind", default="auto,none",
                   help="ringfoldrun --bind-to values to run ringfold and Gloo with (loopback mode); "
                        "ringfold's figure is always the one with auto, its default")
    p.add_argument("--gloo-algorithms", default="ring,halving_doubling,ring_chunked",
                   help="comma-separated gloo_allreduce_perf -A values")
    p.add_argument("--realtime", action="store_true",
                   help="run every launch under 'chrt -f 50' (SCHED_FIFO, root), every system alike: on a "
                        "machine shared with other work, the compared ranks then own the cores while they run")
    p.add_argument("--timeout", type=float, default=120, help="seconds per launch")
    p.add_argument("--op-timeout", type=int, default=60, help="-T passed to the programs")
    p.add_argument("--netns", type=int, default=0, help="emulated cluster with this many hosts")
    p.add_argument("--rate", default="1gbit", help="link rate in --netns mode (tc syntax)")
    p.add_argument("--delay", default="",
                   help="added one-way host-to-host delay in --netns mode, e.g. 0.5ms or 500us "
                        "(RTT twice that): rf_netdelay, from $RF_NETDELAY or build/tests/netns")
    p.add_argument("--netns-prefix", default="rfbh", help="namespace name prefix (--netns)")
    p.add_argument("--netns-min-bytes", default="1M")
    p.add_argument("--netns-max-bytes", default="64M")
    args = p.parse_args()
    if args.realtime:
        PREFIX[:] = ["chrt", "-f", "50"]
    try:
        return netns(args) if args.netns else loopback(args)
    except KeyboardInterrupt as e:
        print(f"interrupted ({e})", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
