#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every CTest test, then the sanitizer
# suites and the fuzzers. Tests that need hardware this machine lacks (GPU, InfiniBand) skip and
# say why. Environment:
#   CTEST_JOBS=N                ctest's (and the sanitizer steps') parallelism (default 2)
#   RINGFOLD_SANITIZERS=LIST    sanitizer suites to run (scripts/sanitize.sh): "address,thread"
#                               (the default), "address" or "thread"; 0 skips them
#   RINGFOLD_FUZZ_SECONDS=N     seconds per fuzz target (default 10); 0 skips fuzzing
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
# Sanitizers (docs/reliability.md, "Sanitizers"): every unit and multiprocess test (less the
# exclusions listed in scripts/sanitize.sh, each with its reason) and one replay of every fuzz corpus under
# AddressSanitizer + UBSan in build-asan, which the fuzzing below reuses; then the engine,
# transport, collective and TCP-store suites under ThreadSanitizer in build-tsan. Any sanitizer
# report fails this script.
sanitizers=${RINGFOLD_SANITIZERS:-address,thread}
if [[ $sanitizers != 0 ]]; then
  for mode in ${sanitizers//,/ }; do
    case "$mode" in
      address|thread) JOBS=${CTEST_JOBS:-2} "$root/scripts/sanitize.sh" "$mode" ;;
      *) echo "test.sh: RINGFOLD_SANITIZERS=$sanitizers: not address, thread or 0" >&2; exit 2 ;;
    esac
  done
fi
# Fuzzing (docs/reliability.md): every fuzz target for a few seconds over its corpus, in the
# AddressSanitizer + UBSan build (clang, build-asan): the corpora hold every input that once found
# a defect. RINGFOLD_FUZZ_SECONDS=0 skips it.
if [[ ${RINGFOLD_FUZZ_SECONDS:-10} != 0 ]]; then
  "$root/scripts/fuzz.sh" --seconds "${RINGFOLD_FUZZ_SECONDS:-10}"
fi
