#!/usr/bin/env python3
"""Same-run comparison of engine configurations with engine_perf (gradient allreduce per step).

For each workload (tensors per step, bytes per step) and each configuration (environment
settings), runs `ringfoldrun -np N build/bench/engine_perf`, the configurations interleaved in a
rotating order per repeat so that machine noise hits all of them alike, and reports the median
step time over --repeats launches and its ratio to the first configuration.

Default configurations:
  fused     : defaults (fusion threshold 128 MiB, tensors >= 256 KiB unfused, cycle 1 ms,
              cache on, no timeline)
  fuse-all  : RINGFOLD_FUSION_TENSOR_MAX_BYTES=0 (every size fused, as Horovod)
  unfused   : RINGFOLD_FUSION_THRESHOLD=0
  timeline  : defaults plus RINGFOLD_TIMELINE=<temp file> (rank 0 writes it)
  nocache   : RINGFOLD_CACHE_CAPACITY=0 (every tensor through the coordinator)

  bench/engine/engine_compare.py --build build --np 2 --report bench/results/engine_loopback.md
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

WORKLOADS = [(160, "1M"), (160, "16M")]


def run(build, np, env, tensors, total, steps):
    cmd = [os.path.join(build, "ringfoldrun"), "-np", str(np)]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [os.path.join(build, "bench", "engine_perf"), "--tensors", str(tensors), "--total", total,
            "--steps", str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
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
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--report")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="rf_engine_compare_")
    configs = [("fused", {}), ("fuse-all", {"RINGFOLD_FUSION_TENSOR_MAX_BYTES": "0"}),
               ("unfused", {"RINGFOLD_FUSION_THRESHOLD": "0"}),
               ("timeline", {"RINGFOLD_TIMELINE": os.path.join(tmp, "timeline.json")}),
               ("nocache", {"RINGFOLD_CACHE_CAPACITY": "0"})]
    rows = []
    for tensors, total in WORKLOADS:
        samples = {name: [] for name, _ in configs}
        info = {}
        for rep in range(args.repeats):
            order = configs[rep % len(configs):] + configs[:rep % len(configs)]
            for name, env in order:
                ms, batches, cached = run(args.build, args.np, env, tensors, total, args.steps)
                samples[name].append(ms)
                info[name] = (batches, cached)
        base = statistics.median(samples[configs[0][0]])
        for name, _ in configs:
            med = statistics.median(samples[name])
            rows.append((tensors, total, name, med, med / base, info[name][0], info[name][1]))
            print(f"{tensors:4d} tensors {total:>4s}/step  {name:9s} median step {med:8.3f} ms  "
                  f"x{med / base:5.2f} of fused  batches/step {info[name][0]:6.1f}  cached {info[name][1]:.2f}",
                  flush=True)
    if args.report:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        with open(args.report, "w") as f:
            f.write(f"# Engine configurations, same run ({args.np} ranks, loopback)\n\n")
            f.write(f"{datetime.date.today()}, commit {commit}, median of {args.repeats} interleaved launches, "
                    f"{args.steps} timed steps each. Command:\n\n"
                    f"    bench/engine/engine_compare.py --build {args.build} --np {args.np} "
                    f"--repeats {args.repeats}\n\n")
            f.write("| tensors | bytes/step | configuration | median step (ms) | vs fused | batches/step | cached |\n")
            f.write("|---:|---:|---|---:|---:|---:|---:|\n")
            for t, total, name, med, ratio, batches, cached in rows:
                f.write(f"| {t} | {total} | {name} | {med:.3f} | {ratio:.2f} | {batches:.1f} | {cached:.2f} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
