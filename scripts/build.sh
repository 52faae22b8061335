#!/usr/bin/env bash
# Configures and builds ringfold into ${BUILD_DIR:-build} (Release-ish, tests and benches on).
# Extra CMake arguments are passed through, e.g. scripts/build.sh -DRINGFOLD_SANITIZE=address
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
# Fresh clones of the tree (CI) share ccache's entries: paths are made relative to the tree.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
# The main, ASan and TSan builds (scripts/test.sh) hold about 9 GB of objects together: below
# 16 GB ccache evicts one build's objects for another's, and every CI run compiles from scratch.
if command -v ccache >/dev/null; then
  max_kib=$(ccache -k max_size 2>/dev/null | awk '{v=$1; u=substr(v,length(v)); n=v+0;
    if (u=="G") n*=1048576; else if (u=="M") n*=1024; else if (u=="T") n*=1073741824; else n=v/1024; print int(n)}')
  if [[ ${max_kib:-0} =~ ^[0-9]+$ ]] && ((max_kib < 16 * 1048576)); then ccache -M 16G >/dev/null; fi
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j "$jobs"
