#!/usr/bin/env bash
# Fuzzes the code that reads bytes from peers, the environment and users (tests/fuzz): builds
# them with clang, libFuzzer, AddressSanitizer and UBSan, runs each target for a bounded time
# over its seed corpus, and prints one line per target: executions, executions per second,
# coverage (libFuzzer's edge counter "cov" and feature counter "ft"), corpus size, result.
#
#   scripts/fuzz.sh                      every target for 60 s
#   scripts/fuzz.sh --seconds 600 tcp_frames_fuzz store_client_fuzz
#   scripts/fuzz.sh --replay             only replay every corpus once (the regression tests)
#
# Build: ${ASAN_BUILD_DIR:-build-asan}, scripts/sanitize.sh's AddressSanitizer + UBSan build.
# New inputs found go to <build>/fuzz-corpus/<target> (the seeds in tests/fuzz/corpus stay as
# they are: copy an input there to keep it). A crash, leak, UB or
# hang (an input running over 20 s) is saved under <build>/fuzz-crashes/<target>/ and the
# script exits 1 after the other targets ran; add that input to the corpus once it is fixed.
# The summary also goes to <build>/fuzz-summary.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ASAN_BUILD_DIR:-$root/build-asan}
seconds=60
replay=0
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --replay) replay=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

# The AddressSanitizer + UBSan build (scripts/sanitize.sh address) holds the fuzz targets.
if ((${#targets[@]} == 0)); then
  ASAN_BUILD_DIR="$build" "$root/scripts/sanitize.sh" address --build fuzz_targets
  mapfile -t targets < <(find "$build/tests/fuzz" -maxdepth 1 -name '*_fuzz' -type f -printf '%f\n' | sort)
else
  ASAN_BUILD_DIR="$build" "$root/scripts/sanitize.sh" address --build "${targets[@]}"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export RINGFOLD_LOG_LEVEL=fatal
summary="$build/fuzz-summary.md"
{
  echo "| target | seconds | executions | exec/s | cov | ft | corpus | result |"
  echo "|---|---:|---:|---:|---:|---:|---:|---|"
} >"$summary"
status=0
# One allocation is a finding only past this host's memory (the transports buffer what a peer
# announces, up to what the host can hold); what is really used stays under -rss_limit_mb.
memory_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
for t in "${targets[@]}"; do
  bin=$(find "$build/tests/fuzz" -maxdepth 1 -name "$t" -type f | head -1)
  [[ -x "$bin" ]] || { echo "fuzz.sh: no target $t" >&2; exit 2; }
  seeds="$root/tests/fuzz/corpus/$t"
  work="$build/fuzz-corpus/$t"
  crashes="$build/fuzz-crashes/$t"
  mkdir -p "$work" "$crashes" "$seeds"
  log="$build/fuzz-$t.log"
  if ((replay)); then
    args=(-runs=0 "$seeds")
    budget=$seconds
  else
    args=(-max_total_time="$seconds" "$work" "$seeds")
    budget=$((seconds + 60))
  fi
  result=ok
  # libFuzzer stops itself at -max_total_time; the outer timeout only catches a stuck harness.
  if ! timeout --kill-after=10 "$budget" "$bin" -print_final_stats=1 -timeout=20 -rss_limit_mb=3072 \
       -malloc_limit_mb="$memory_mb" \
       -artifact_prefix="$crashes/" "${args[@]}" >"$log" 2>&1; then
    result="FAILED (see $log)"
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*' || echo -)
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*' || echo -)
  corpus=$(grep -o 'corp: [0-9]*' <<<"$last" | grep -o '[0-9]*' || echo -)
  echo "| $t | $seconds | $execs | $rate | $cov | $ft | $corpus | $result |" >>"$summary"
  printf 'fuzz.sh: %-22s %10s runs %7s/s cov %5s ft %6s corpus %5s  %s\n' "$t" "$execs" "$rate" "$cov" "$ft" "$corpus" "$result"
done
echo "fuzz.sh: summary in $summary"
exit $status
