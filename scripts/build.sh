#!/usr/bin/env bash
# Configures and builds ringfold into ${BUILD_DIR:-build} (Release-ish, tests and benches on).
# Extra CMake arguments are passed through, e.g. scripts/build.sh -DRINGFOLD_SANITIZE=address
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
# Fresh clones of the tree (CI) share ccache's entries: paths are made relative to the tree.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j "$jobs"
