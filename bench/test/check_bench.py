#!/usr/bin/env python3
"""CTest check of the nccl-tests-style bench programs (never timed).

Runs every program with 3 ranks through ringfoldrun at small sizes with checking on, plus one
`-d all -o all` run, and fails unless each run exits 0, prints the nccl-tests column header,
has the expected rows, shows #wrong 0 in every checked column and reports no out-of-bounds
values. Also checks that -t 2 is refused with an explanation. Each run is bounded in time.

  check_bench.py --launcher build/ringfoldrun --bench build/bench/all_reduce_perf --bench ...
"""
import argparse
import os
import re
import subprocess
import sys

HEADER = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong"
          "     time   algbw   busbw  #wrong ")
TYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
         "bfloat16"]
OPS = ["sum", "prod", "max", "min", "avg"]


def run(cmd, timeout=90):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {timeout}s"
    return p.returncode, p.stdout, p.stderr


def sizes(lo, hi, factor):
    out = []
    s = lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


# ringfoldrun prefixes every forwarded line with its rank, as horovodrun does.
RANK_PREFIX = re.compile(r"^\[\d+\]<stdout>:")


def check_output(name, out, expect_rows, in_place_checked=True):
    errors = []
    lines = [RANK_PREFIX.sub("", l) for l in out.splitlines()]
    if HEADER not in lines:
        errors.append("nccl-tests column header missing")
    rows = [l.split() for l in lines if l.strip() and not l.startswith("#")]
    if len(rows) != expect_rows:
        errors.append(f"{len(rows)} rows, expected {expect_rows}")
    for f in rows:
        if len(f) != 13:
            errors.append(f"malformed row: {' '.join(f)}")
            continue
        if f[8] != "0":
            errors.append(f"out-of-place #wrong {f[8]} in row: {' '.join(f)}")
        if in_place_checked and f[12] != "0":
            errors.append(f"in-place #wrong {f[12]} in row: {' '.join(f)}")
        if not in_place_checked and f[12] != "N/A":
            errors.append(f"in-place column should be N/A: {' '.join(f)}")
    if "# Out of bounds values : 0 OK" not in lines:
        errors.append("footer does not say '# Out of bounds values : 0 OK'")
    if not any(l.startswith("# Avg bus bandwidth    : ") for l in lines):
        errors.append("footer lacks '# Avg bus bandwidth'")
    if f"# Collective test concluded: {name}" not in lines:
        errors.append("footer lacks '# Collective test concluded'")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--bench", action="append", required=True)
    ap.add_argument("--np", type=int, default=3)
    ap.add_argument("--launcher-arg", action="append", default=[],
                    help="extra launcher argument before -np (e.g. mpirun's --oversubscribe)")
    args = ap.parse_args()
    progs = {os.path.basename(p): p for p in args.bench}
    small = ["-b", "8", "-e", "1M", "-f", "8", "-c", "1", "-n", "2", "-w", "1", "-T", "30"]
    nsizes = len(sizes(8, 1 << 20, 8))
    cases = []
    for name in sorted(progs):
        extra = []
        expect = nsizes
        if name == "broadcast_perf":
            extra = ["-r", "1"]
        cases.append((name, small + extra, expect, name != "sendrecv_perf"))
    if "all_reduce_perf" in progs:
        cases.append(("all_reduce_perf",
                      ["-b", "8", "-e", "4K", "-f", "8", "-c", "1", "-n", "1", "-w", "1",
                       "-d", "all", "-o", "all", "-T", "30"],
                      len(sizes(8, 4096, 8)) * len(TYPES) * len(OPS), True))
    if "broadcast_perf" in progs:  # every root, every type
        cases.append(("broadcast_perf",
                      ["-b", "8", "-e", "4K", "-f", "64", "-c", "1", "-n", "1", "-w", "1",
                       "-d", "all", "-r", "-1", "-T", "30"],
                      len(sizes(8, 4096, 64)) * len(TYPES) * args.np, True))
    failed = 0
    for name, flags, expect, ip_checked in cases:
        cmd = [args.launcher] + args.launcher_arg + ["-np", str(args.np), progs[name]] + flags
        rc, out, err = run(cmd)
        errors = [] if rc == 0 else [f"exit status {rc}: {err.strip()[-1500:]}"]
        if rc is not None:
            errors += check_output(name, out, expect, ip_checked)
        status = "ok" if not errors else "FAILED"
        print(f"[{status}] {' '.join(cmd)}")
        if errors:
            failed += 1
            for e in errors:
                print(f"    {e}")
            print(out[-3000:])
    # -t / -g are refused with an explanation (ranks are processes).
    if "all_reduce_perf" in progs:
        rc, out, err = run([progs["all_reduce_perf"], "-t", "2"], timeout=30)
        ok = rc == 2 and "ringfoldrun" in err
        print(f"[{'ok' if ok else 'FAILED'}] all_reduce_perf -t 2 is refused")
        if not ok:
            failed += 1
            print(f"    rc={rc} stderr={err.strip()}")
    print(f"{len(cases) + 1 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
