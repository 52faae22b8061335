#!/usr/bin/env python3
"""ABI of ringfold's libnccl.so.2 against NVIDIA's, from the symbol tables (nm -D, readelf -d).

Contract: exits 0 when
  * the library's soname is libnccl.so.2;
  * it exports nccl*/pnccl* functions only (no C++ symbol of ringfold leaks);
  * every nccl*/pnccl* function in each list under data/ (NCCL 2.28.9's and 2.30.7's exports,
    torch 2.15's libtorch_cuda.so imports; each file names the command that made it) is exported,
    and nothing beyond their union is;
  * every nccl*/pnccl* function that /usr/local/cuda/lib64/libnccl.so.2 exports (when that file
    exists, read now) is exported too;
and 1 with every difference printed otherwise. Usage: abi_test.py LIBNCCL DATA_DIR
"""
import os
import subprocess
import sys


def dynamic_symbols(path, defined=True):
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, path], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def listed(path):
    with open(path) as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def main():
    lib, data = sys.argv[1], sys.argv[2]
    errors = []
    dyn = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True, text=True).stdout
    if "Library soname: [libnccl.so.2]" not in dyn:
        errors.append("soname is not libnccl.so.2")
    ours = dynamic_symbols(lib)
    exported = {s for s in ours if not s.startswith("_")}  # _init/_fini-like linker symbols aside
    leaks = sorted(s for s in exported if not (s.startswith("nccl") or s.startswith("pnccl")))
    leaks += sorted(s for s in ours if s.startswith("_Z"))
    if leaks:
        errors.append("exports other than nccl*/pnccl*: " + " ".join(leaks[:20]))
    union = set()
    for name in sorted(os.listdir(data)):
        want = listed(os.path.join(data, name))
        union |= want
        missing = sorted(want - ours)
        print(f"{name}: {len(want)} functions, {len(want) - len(missing)} exported")
        if missing:
            errors.append(f"{name}: not exported: " + " ".join(missing))
    extra = sorted(s for s in exported if s not in union)
    if extra:
        errors.append("exported but in no list: " + " ".join(extra))
    real = "/usr/local/cuda/lib64/libnccl.so.2"
    if os.path.exists(real):
        want = {s for s in dynamic_symbols(real) if s.startswith("nccl") or s.startswith("pnccl")}
        missing = sorted(want - ours)
        print(f"{real}: {len(want)} functions, {len(want) - len(missing)} exported")
        if missing:
            errors.append(f"{real}: not exported: " + " ".join(missing))
    else:
        print(f"{real} is absent: compared with the checked-in lists only")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
