#!/usr/bin/env python3
"""PyTorch's libtorch_cuda.so on ringfold's libnccl.so.2 under LD_PRELOAD, without a GPU.

Contract: run with the torch test venv's python (scripts/pyenv.sh
bindings/python/requirements-test.txt run python3 THIS LIBNCCL). Exits 0 when
  * with LD_PRELOAD=LIBNCCL and LD_BIND_NOW=1, every nccl*/pnccl* symbol that libtorch_cuda.so
    binds at import (all of them, under LD_BIND_NOW) binds to LIBNCCL, none to the
    nvidia-nccl-cu13 copy that torch also loads by full path;
  * torch.cuda.nccl.unique_id() (torch's own call of ncclGetUniqueId) returns ringfold's id
    (magic b"rfnccl01") under LD_PRELOAD, and another library's id without it;
and 1 otherwise (77: skipped, torch missing). Each child process is bounded by a timeout.
"""
import os
import re
import subprocess
import sys

lib = os.path.realpath(sys.argv[1])
try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)


def run(code, preload, extra=None, timeout=120):
    env = dict(os.environ, RINGFOLD_NCCL_STORE_ADDR="127.0.0.1")
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = lib
    env.update(extra or {})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout)


errors = []
p = run("import torch", True, {"LD_BIND_NOW": "1", "LD_DEBUG": "bindings"})
binding = re.compile(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `(p?nccl\w+)'")
seen = {}
for line in p.stderr.splitlines():
    m = binding.search(line)
    if m and m.group(1).endswith("libtorch_cuda.so"):
        seen[m.group(3)] = os.path.realpath(m.group(2))
wrong = {s: where for s, where in seen.items() if where != lib}
print(f"libtorch_cuda.so bound {len(seen)} nccl symbols, {len(seen) - len(wrong)} to {lib}")
if len(seen) < 40:
    errors.append(f"only {len(seen)} nccl bindings of libtorch_cuda.so seen (exit {p.returncode})")
if wrong:
    errors.append("bound elsewhere: " + ", ".join(f"{s} -> {w}" for s, w in sorted(wrong.items())))

code = "import torch; print(torch.cuda.nccl.unique_id()[:8])"
with_ours = run(code, True)
print("with LD_PRELOAD:", with_ours.stdout.strip(), with_ours.stderr.strip()[-300:])
if with_ours.returncode != 0 or "rfnccl01" not in with_ours.stdout:
    errors.append("torch.cuda.nccl.unique_id() under LD_PRELOAD is not ringfold's")
without = run(code, False)
print("without:", without.stdout.strip(), without.stderr.strip()[-300:])
if "rfnccl01" in without.stdout:
    errors.append("without LD_PRELOAD torch still reached ringfold's library: the check proves nothing")

for e in errors:
    print("FAIL:", e)
sys.exit(1 if errors else 0)
