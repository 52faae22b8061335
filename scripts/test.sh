#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every CTest test.
# Tests that need hardware this machine lacks (GPU, InfiniBand) skip and say why.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/deploy/venv.sh" >/dev/null   # cached Python env of the deploy/ checks (tests/deploy)
"$root/scripts/build.sh"
build=${BUILD_DIR:-$root/build}
# The Python package: `pip wheel .` (scikit-build-core) into <build>/python-site, for tests/python,
# using the cached venv with torch (bindings/python/requirements-test.txt).
BUILD_DIR="$build" "$root/scripts/python_package.sh" >/dev/null
cd "$build"
ctest --output-on-failure --timeout 600 -j "${CTEST_JOBS:-2}" "$@"
