#!/usr/bin/env bash
# The main job: install what is missing, build, and run a 4-rank allreduce benchmark over the
# io_uring TCP transport on this machine (nccl-tests output format).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh"
build=${BUILD_DIR:-$root/build}
"$build/ringfoldrun" -np 4 "$build/bench/all_reduce_perf" -b 8 -e 64M -f 4 -n 20 -w 5 -c 1
