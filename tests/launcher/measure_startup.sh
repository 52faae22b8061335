#!/usr/bin/env bash
# Start-up time of a ringfoldrun job on this machine, printed (never asserted: machines are
# shared and noisy): N ranks as processes (default 256), each running launcher_join_probe,
#   store : every rank connects to the launcher's store and meets the others there;
#   mesh  : every rank joins the communicator (store + full TCP mesh: N(N-1)/2 connections).
# Times run from just before ringfoldrun starts to the last rank arriving.
# The 4-host version (emulated hosts, ssh) is printed by the netns suite
# (ctest -L netns --verbose: lines "[ measure  ]").
#
#   tests/launcher/measure_startup.sh [N] [ROUNDS]     (BUILD_DIR defaults to ./build)
set -euo pipefail
n=${1:-256}; rounds=${2:-2}
build=${BUILD_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/build}
run=$build/ringfoldrun probe=$build/tests/launcher/launcher_join_probe
[[ -x $run && -x $probe ]] || { echo "build ringfoldrun and launcher_join_probe first" >&2; exit 2; }
for mode in store mesh; do
  for ((i = 1; i <= rounds; i++)); do
    arg=(); [[ $mode == store ]] && arg=(--store-only)
    RINGFOLD_PROBE_T0_NS=$(date +%s%N) timeout 300 "$run" -np "$n" --start-timeout 240 "$probe" "${arg[@]}" \
      | sed -n 's/^\[0\]<stdout>:join_probe: /'"$mode"': /p'
  done
done
