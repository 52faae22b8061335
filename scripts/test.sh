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
(cd "$build" && ctest --output-on-failure --timeout 600 -j "${CTEST_JOBS:-2}" "$@")
# Fuzzing (docs/reliability.md): every fuzz target for a few seconds over its corpus, in the
# AddressSanitizer + UBSan build (clang, build-asan): the corpora hold every input that once found
# a defect. RINGFOLD_FUZZ_SECONDS=0 skips it. The unit suites under the sanitizers run with
# scripts/sanitize.sh address|thread.
if [[ ${RINGFOLD_FUZZ_SECONDS:-10} != 0 ]]; then
  "$root/scripts/fuzz.sh" --seconds "${RINGFOLD_FUZZ_SECONDS:-10}"
fi
