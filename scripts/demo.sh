#!/usr/bin/env bash
# The main job: install what is missing, build, run a 4-rank allreduce benchmark over the
# io_uring TCP transport on this machine (nccl-tests output format), then a short 4-rank PyTorch
# training with `import ringfold.torch as hvd` (examples/pytorch_train.py), launched by the
# ringfoldrun command of the freshly built `ringfold` wheel.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh"
build=${BUILD_DIR:-$root/build}
"$build/ringfoldrun" -np 4 "$build/bench/all_reduce_perf" -b 8 -e 64M -f 4 -n 20 -w 5 -c 1
venv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-test.txt")
site=$(BUILD_DIR="$build" "$root/scripts/python_package.sh")
PYTHONPATH="$site" "$site/bin/ringfoldrun" -np 4 "$venv/bin/python" "$root/examples/pytorch_train.py"
