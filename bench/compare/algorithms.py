#!/usr/bin/env python3
"""Allreduce algorithms side by side on the emulated cluster (issue 19), and the simulator's
prediction for each, from the constants the job measured at start-up.

Builds HOSTS network namespaces (netns_cluster.sh: links shaped to RATE, one-way DELAY added by
the delay emulator), starts PER_HOST ranks of build/bench/all_reduce_perf in each, and runs the
sweep once per RINGFOLD_ALGO value, the values interleaved within each repeat. Small sizes
(4 B - 64 KiB) and large ones (256 KiB - 64 MiB) are separate launches with their own iteration
counts. Reports the median over repeats of the out-of-place time per size and algorithm, the
tree/ring latency ratio, auto against the best, and (with --sim) rf_sim's prediction for each
algorithm and its error against the measurement.

  sudo python3 bench/compare/algorithms.py --build build --hosts 8 --rate 1gbit --delay 0.5ms \\
      --algos ring,tree,direct,auto --repeats 3 --sim --report bench/results/algorithms_netns_8x1.md
  sudo python3 bench/compare/algorithms.py --build build --hosts 4 --per-host 2 \\
      --algos ring,hierarchical,tree,auto --large-only --report bench/results/algorithms_netns_4x2.md
"""
import argparse
import os
import re
import secrets
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (NetnsCluster, RunError, busbw, clean_env, environment_text, human,  # noqa: E402
                     median, parse_rows, run_many, RANK_PREFIX)

MODEL_LINE = re.compile(r"Allreduce model: (.*?) \(RINGFOLD_ALGO")
CHOICE_LINE = re.compile(r"Algorithm by size: (.*)")


def job(cluster, args, bench, algo, lo, hi, iters):
    n = args.hosts * args.per_host
    secret = secrets.token_hex(16)
    flags = ["-b", lo, "-e", hi, "-f", "4", "-n", str(iters), "-w", "2", "-c", "1",
             "-T", str(args.op_timeout)]
    cmds = []
    for h in range(args.hosts):
        for l in range(args.per_host):
            rank = h * args.per_host + l
            env = clean_env({"RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(l),
                             "LOCAL_WORLD_SIZE": str(args.per_host), "MASTER_ADDR": cluster.addr(0),
                             "MASTER_PORT": "29500", "RINGFOLD_SECRET": secret,
                             "RINGFOLD_SOCKET_IFNAME": f"{cluster.prefix}v{h}"})
            if algo != "auto":
                env["RINGFOLD_ALGO"] = algo
            cmds.append((["ip", "netns", "exec", cluster.ns(h), os.path.join(bench, "all_reduce_perf")] + flags, env))
    return run_many(cmds, args.timeout)


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def parse_choices(line):
    """'4-16K direct; 64K-16M ring chunk 1M;' -> [(lo, hi, algo, segment, chunk)]."""
    out = []
    for part in filter(None, (p.strip() for p in line.split(";"))):
        words = part.split()
        lo, _, hi = words[0].partition("-")
        seg = words[words.index("seg") + 1] if "seg" in words else None
        chunk = words[words.index("chunk") + 1] if "chunk" in words else None
        out.append((parse_bytes(lo), parse_bytes(hi or lo), words[1], seg, chunk))
    return out


def sim_predict(args, algo, model, choices, size):
    """rf_sim's predicted time (us) of `algo` at `size`, from the measured constants, with the
    tree segment and ring chunk that run used (its header's choices), or None."""
    n = args.hosts * args.per_host
    consts = dict(kv.split("=") for kv in model.split())
    seg, chunk = None, None
    for lo, hi, _, s, c in choices:
        if lo <= size <= hi:
            seg, chunk = s, c
    cmd = [os.path.join(args.build, "bench", "rf_sim"), "--ranks", str(n), "--per-host", str(args.per_host),
           "--algo", algo, "-b", str(size), "-e", str(size),
           "--alpha-local", consts["local_alpha"], "--beta-local", consts["local_beta"],
           "--alpha-remote", consts["remote_alpha"], "--beta-remote", consts["remote_beta"],
           "--overhead", consts["remote_overhead" if args.hosts > 1 else "local_overhead"], "--gamma", consts["gamma"]]
    if args.sim_cpus:
        cmd += ["--cpus", str(args.sim_cpus)]
    if seg:
        cmd += ["--tree-segment-bytes", seg]
    if chunk:
        cmd += ["--ring-chunk-bytes", chunk]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    for line in out.splitlines():  # rf_sim prints the out-of-place columns only
        f = line.split()
        if len(f) >= 9 and not line.startswith("#") and f[0] == str(size) and f[2] != "ring":
            try:
                return float(f[5])
            except ValueError:
                return None
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--hosts", type=int, default=8)
    p.add_argument("--per-host", type=int, default=1)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--delay", default="0.5ms", help="one-way delay added to every link ('' for none)")
    p.add_argument("--algos", default="ring,tree,direct,auto")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--small-iters", type=int, default=20)
    p.add_argument("--large-iters", type=int, default=3)
    p.add_argument("--large-only", action="store_true", help="only 256 KiB - 64 MiB")
    p.add_argument("--small-only", action="store_true", help="only 4 B - 64 KiB")
    p.add_argument("--sim", action="store_true", help="add rf_sim's predictions (build/bench/sim/rf_sim)")
    p.add_argument("--sim-cpus", type=int, default=0,
                   help="rf_sim --cpus: the CPUs every emulated host shares (0: one per rank, as on real hosts)")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--op-timeout", type=int, default=120)
    p.add_argument("--prefix", default="rfal")
    p.add_argument("--report", default="")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces and tc)")
    args.build = os.path.abspath(args.build)
    bench = os.path.join(args.build, "bench")
    algos = args.algos.split(",")
    sweeps = [] if args.small_only else [("256K", "64M", args.large_iters)]
    if not args.large_only:
        sweeps.insert(0, ("4", "64K", args.small_iters))
    times = {}  # (algo, size) -> [us]
    models, choices, failures = [], [], []
    picked = {}  # algo -> [(lo, hi, algo, segment, chunk)] from its first launch of each sweep
    model_of = {}  # algo -> the constants its first launch measured
    started = time.monotonic()
    with NetnsCluster(args.hosts, args.rate, args.delay, args.prefix) as cluster:
        for rep in range(args.repeats):
            for algo in algos:
                for lo, hi, iters in sweeps:
                    try:
                        out = job(cluster, args, bench, algo, lo, hi, iters)
                    except RunError as e:
                        failures.append(f"{algo} {lo}-{hi}: {str(e).splitlines()[0]}")
                        print(f"# FAILED {algo} {lo}-{hi}", flush=True)
                        continue
                    for line in (RANK_PREFIX.sub("", l) for l in out.splitlines()):
                        m = MODEL_LINE.search(line)
                        if m and algo == "auto":
                            models.append(m.group(1))
                        if m and algo not in model_of:
                            model_of[algo] = m.group(1)
                        c = CHOICE_LINE.search(line)
                        if c and algo == "auto":
                            choices.append(f"{lo}-{hi}: {c.group(1)}")
                        if c and rep == 0:
                            picked.setdefault(algo, []).extend(parse_choices(c.group(1)))
                    for row in parse_rows(out):
                        if row["oop_wrong"] != "0":
                            failures.append(f"{algo} {human(row['size'])}: #wrong {row['oop_wrong']}")
                        times.setdefault((algo, row["size"]), []).append(row["oop_time"])
                print(f"# repeat {rep + 1} {algo} done ({time.monotonic() - started:.0f}s)", flush=True)

    n = args.hosts * args.per_host
    sizes = sorted({s for _, s in times})
    med = {k: median(v) for k, v in times.items()}
    predicted = {}
    if args.sim:
        for algo in algos:
            if algo == "auto" or algo not in model_of:
                continue
            for size in sizes:
                try:
                    t = sim_predict(args, algo, model_of[algo], picked.get(algo, []), size)
                    if t:
                        predicted[(algo, size)] = t
                except (subprocess.SubprocessError, OSError, KeyError, ValueError) as e:
                    failures.append(f"rf_sim {algo} {size}: {e}")

    lines = [f"# Allreduce algorithms on the emulated cluster: {args.hosts} hosts x {args.per_host} ranks, "
             f"{args.rate}, one-way delay {args.delay or 'none'}", "", environment_text(args), "",
             f"Out-of-place time per iteration in us, median of {args.repeats} interleaved launches "
             "(busbw in GB/s in parentheses); float32 sum.", ""]
    if models:
        lines += [f"Model constants measured by the auto runs (first launch): `{models[0]}`", ""]
    if choices:
        lines += ["auto's choices (all_reduce_perf header, first launch of each sweep):", ""]
        lines += [f"- {c}" for c in choices[:len(sweeps)]] + [""]
    head = "| size | " + " | ".join(algos) + " |"
    extra = []
    if "tree" in algos and "ring" in algos:
        extra.append("tree / ring time")
    best_of = [a for a in algos if a != "auto"]
    if "auto" in algos and best_of:
        extra.append("auto / best time")
    lines += [head[:-1] + "".join(f"| {e} " for e in extra) + "|",
              "|---" * (1 + len(algos) + len(extra)) + "|"]
    for size in sizes:
        row = [human(size)]
        for a in algos:
            t = med.get((a, size))
            row.append("-" if t is None else f"{t:.1f} ({busbw(size, n, t):.3f})")
        if "tree / ring time" in extra:
            r, t = med.get(("ring", size)), med.get(("tree", size))
            row.append(f"{t / r:.2f}" if r and t else "-")
        if "auto / best time" in extra:
            best = min((med[(a, size)] for a in best_of if (a, size) in med), default=None)
            a = med.get(("auto", size))
            row.append(f"{a / best:.2f}" if a and best else "-")
        lines.append("| " + " | ".join(row) + " |")
    if predicted:
        lines += ["", "Simulator (`rf_sim`, the same schedules, the constants above, each size with the tree "
                      "segment and ring chunk that algorithm's run chose) against the measurement: predicted us "
                      "and error (predicted / measured - 1).", "",
                  "| size | " + " | ".join(f"{a} predicted | {a} error" for a in algos if a != "auto") + " |",
                  "|---" * (1 + 2 * len(best_of)) + "|"]
        for size in sizes:
            row = [human(size)]
            for a in best_of:
                pr, me = predicted.get((a, size)), med.get((a, size))
                row += [f"{pr:.1f}" if pr else "-", f"{pr / me - 1:+.0%}" if pr and me else "-"]
            lines.append("| " + " | ".join(row) + " |")
    if failures:
        lines += ["", "Failures:", ""] + [f"- {f}" for f in failures]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
