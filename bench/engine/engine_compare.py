#!/usr/bin/env python3
"""Same-run comparison of engine configurations with engine_perf (gradient allreduce per step).

For each workload (the gradient sizes of ResNet-50 and BERT-base, each tensor enqueued
separately in backward order, as a framework's hooks do) and each configuration, runs
`ringfoldrun -np N build/bench/engine_perf`, the configurations interleaved in a rotating order
per repeat so that machine noise hits all of them alike, and reports the median step time over
--repeats launches and its ratio to the first configuration.

Configurations:
  fused     : defaults (fusion threshold 128 MiB, tensors >= 256 KiB unfused, cycle 1 ms,
              cache on, no timeline)
  single    : one allreduce of a single buffer of the same total size (--single 1): the bound
              fusion is measured against
  unfused   : RINGFOLD_FUSION_THRESHOLD=0
  fuse-all  : RINGFOLD_FUSION_TENSOR_MAX_BYTES=0 (every size fused, as Horovod)
  timeline  : defaults plus RINGFOLD_TIMELINE=<temp file> (rank 0 writes it)
Then the enqueue-to-completion time of a 4-byte allreduce (median of 200) at cycle 1 ms and
0.1 ms.

  bench/engine/engine_compare.py --build build --np 4 --report bench/results/engine_loopback.md
Traffic goes only over 127.0.0.1; every launch runs under a timeout.
"""

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile

WORKLOADS = ["resnet50", "bert-base"]


def launch(build, np, env, args):
    cmd = [os.path.join(build, "ringfoldrun"), "-np", str(np)]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [os.path.join(build, "bench", "engine_perf")] + args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def run(build, np, env, model, steps, extra):
    cmd = [os.path.join(build, "ringfoldrun"), "-np", str(np)]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [os.path.join(build, "bench", "engine_perf"), "--model", model, "--steps", str(steps),
            "--warmup", "2"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    m = re.search(r"median_step_ms ([0-9.]+)\s+algbw_GBps ([0-9.]+)\s+batches_per_step ([0-9.]+)\s+cached ([0-9.]+)",
                  out.stdout)
    if not m:
        raise RuntimeError(f"no result line in:\n{out.stdout}")
    return float(m.group(1)), float(m.group(3)), float(m.group(4))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--report")
    ap.add_argument("--baseline", help="another build directory (e.g. of the parent commit): every "
                                       "configuration also runs from it, interleaved, as 'base-<name>'")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="rf_engine_compare_")
    configs = [("fused", {}, []), ("single", {}, ["--single", "1"]),
               ("unfused", {"RINGFOLD_FUSION_THRESHOLD": "0"}, []),
               ("fuse-all", {"RINGFOLD_FUSION_TENSOR_MAX_BYTES": "0"}, []),
               ("timeline", {"RINGFOLD_TIMELINE": os.path.join(tmp, "timeline.json")}, [])]
    builds = {name: args.build for name, _, _ in configs}
    if args.baseline:
        configs += [("base-" + name, env, extra) for name, env, extra in configs]
        builds.update({name: args.baseline for name, _, _ in configs if name.startswith("base-")})
    rows = []
    for model in WORKLOADS:
        samples = {name: [] for name, _, _ in configs}
        info = {}
        for rep in range(args.repeats):
            order = configs[rep % len(configs):] + configs[:rep % len(configs)]
            for name, env, extra in order:
                ms, batches, cached = run(builds[name], args.np, env, model, args.steps, extra)
                samples[name].append(ms)
                info[name] = (batches, cached)
        for name, _, _ in configs:
            prefix = "base-" if name.startswith("base-") else ""
            base = statistics.median(samples[prefix + "fused"])
            single = statistics.median(samples[prefix + "single"])
            med = statistics.median(samples[name])
            rows.append((model, name, med, med / base, med / single, info[name][0], info[name][1]))
            print(f"{model:10s} {name:9s} median step {med:8.3f} ms  x{med / base:5.2f} of fused  "
                  f"x{med / single:5.2f} of single  batches/step {info[name][0]:6.1f}  cached {info[name][1]:.2f}",
                  flush=True)
    latencies = []
    for cycle in ("1", "0.1"):
        for label, build in [("", args.build)] + ([("base ", args.baseline)] if args.baseline else []):
            out = launch(build, args.np, {"RINGFOLD_CYCLE_TIME": cycle},
                         ["--tensors", "1", "--total", "64", "--steps", "1", "--warmup", "0", "--latency", "200"])
            m = re.search(r"latency_4B median_us ([0-9.]+)\s+p90_us ([0-9.]+)", out)
            latencies.append((label, cycle, float(m.group(1)), float(m.group(2))))
            print(f"{label}4-byte allreduce, cycle {cycle} ms: median {m.group(1)} us, p90 {m.group(2)} us",
                  flush=True)
    if args.report:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        with open(args.report, "w") as f:
            f.write(f"# Engine: fusion, timeline and latency, same run ({args.np} ranks, loopback)\n\n")
            f.write(f"{datetime.date.today()}, commit {commit}, median of {args.repeats} interleaved launches, "
                    f"{args.steps} timed steps each. Command:\n\n"
                    f"    bench/engine/engine_compare.py --build {args.build} --np {args.np} "
                    f"--repeats {args.repeats}\n\n")
            f.write("| model | configuration | median step (ms) | vs fused | vs single buffer | batches/step | cached |\n")
            f.write("|---|---|---:|---:|---:|---:|---:|\n")
            for model, name, med, ratio, vs_single, batches, cached in rows:
                f.write(f"| {model} | {name} | {med:.1f} | {ratio:.2f} | {vs_single:.2f} | {batches:.1f} | {cached:.2f} |\n")
            f.write("\nEnqueue-to-completion of a 4-byte allreduce (median of 200, after the previous one completed):\n\n")
            for label, cycle, med, p90 in latencies:
                f.write(f"- {label}cycle time {cycle} ms: median {med:.0f} us, p90 {p90:.0f} us\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
