#!/usr/bin/env bash
# Builds ringfold under the sanitizers and runs test suites there (docs/reliability.md,
# "Sanitizers"):
#
#   scripts/sanitize.sh address     AddressSanitizer + UndefinedBehaviorSanitizer (clang), in
#                                   ${ASAN_BUILD_DIR:-build-asan}; the fuzz targets of
#                                   tests/fuzz are built there too (RINGFOLD_FUZZ=ON)
#   scripts/sanitize.sh thread      ThreadSanitizer (clang), in ${TSAN_BUILD_DIR:-build-tsan}
#   scripts/sanitize.sh MODE --build TARGET...   configure and build only these targets
#   scripts/sanitize.sh MODE -- CTEST_ARGS...     run these tests instead of the mode's suites
#
# The suites each mode runs by default (the subsets that fit CI's time; the whole tree works
# too, with `-- -j2`):
#   address: every test labelled unit, and one replay of every fuzz corpus (label fuzz);
#   thread:  the unit tests of the engine, the transports, the communicator and the store
#            (the suites named in thread_suites below).
# Findings abort the test (UBSan does not recover; ASan and TSan stop at the first report),
# so a sanitizer report is a failed test with the report in its output.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
shift || true
case "$mode" in
  address) build=${ASAN_BUILD_DIR:-$root/build-asan}; flags=("-DRINGFOLD_SANITIZE=address,undefined" -DRINGFOLD_FUZZ=ON) ;;
  thread) build=${TSAN_BUILD_DIR:-$root/build-tsan}; flags=(-DRINGFOLD_SANITIZE=thread) ;;
  *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
# ThreadSanitizer's suites: the engine and everything with threads below it, in one process.
thread_suites='^(Engine|Negotiation|Timeline|Autotune|Loopback|Shm|TcpUring|PerPeer|TransportLiveness|Communicator|SendRecv|PairLink|TcpStore|JobStore)'
targets=()
ctest_args=()
if [[ "${1:-}" == --build ]]; then
  shift
  targets=("$@")
  (($#)) || { echo "sanitize.sh: --build needs targets" >&2; exit 2; }
elif [[ "${1:-}" == -- ]]; then
  shift
  ctest_args=("$@")
elif (($#)); then
  echo "sanitize.sh: unexpected argument $1" >&2; exit 2
fi
if ! command -v clang++ >/dev/null; then
  echo "sanitize.sh: clang++ is missing (scripts/install_deps.sh installs clang and libclang-rt-dev)" >&2
  exit 1
fi

# Fresh clones of the tree (CI) share ccache's entries: paths are made relative to the tree.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRINGFOLD_WITH_CUDA=OFF \
  -DRINGFOLD_WITH_NCCL_API=OFF -DRINGFOLD_BUILD_BENCH=OFF "${flags[@]}" >/dev/null
jobs=${JOBS:-$(nproc)}
if ((${#targets[@]})); then
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
  exit 0
fi
cmake --build "$build" -j "$jobs"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
if ((${#ctest_args[@]} == 0)); then
  if [[ $mode == address ]]; then
    ctest_args=(-L '^(unit|fuzz)$')
  else
    ctest_args=(-L '^unit$' -R "$thread_suites")
  fi
  ctest_args+=(-j "$jobs")
fi
cd "$build"
ctest --output-on-failure --timeout 900 "${ctest_args[@]}"
