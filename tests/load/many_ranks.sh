#!/usr/bin/env bash
# Many ranks on this host meet and run one allreduce, checked bit for bit (many_ranks_rank.cc).
#
#   tests/load/many_ranks.sh N [shm|unix|tcp] [RINGFOLDRUN] [RANK_PROGRAM]
#
#   N             ranks (ctest Load.ManyRanks.* runs RINGFOLD_LOAD_RANKS, 64; the load figures
#                 in docs/reliability.md come from N=256)
#   shm|unix|tcp  how ranks of one host are joined (RINGFOLD_LOCAL_TRANSPORT; default shm, the
#                 library's default)
#   RINGFOLDRUN, RANK_PROGRAM  default ${BUILD_DIR:-build}/ringfoldrun and
#                 ${BUILD_DIR:-build}/tests/load/load_many_ranks_rank
#
# Prints rank 0's line (many_ranks ok ranks=N meet_ms=... allreduce_ms=... rss_max_kib=...), the
# launcher's wall time, and the peak of memory in use on the machine during the run (the largest
# drop of MemAvailable from before the start, and the largest Shmem growth: shared-memory rings
# are not in any one rank's RSS). Exit status: ringfoldrun's (0: every rank checked its result and
# rank 0 reported), else non-zero. START_TIMEOUT (default 120 s), ELEMENTS (65536) and
# MIN_AVAILABLE_MIB (3072: the job is stopped if the machine's available memory falls below it)
# may be set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$root/build}
n=${1:?usage: tests/load/many_ranks.sh N [shm|unix|tcp] [RINGFOLDRUN] [RANK_PROGRAM]}
backend=${2:-shm}
launcher=${3:-$build/ringfoldrun}
program=${4:-$build/tests/load/load_many_ranks_rank}
case "$backend" in shm|unix|tcp) ;; *) echo "many_ranks.sh: backend must be shm, unix or tcp" >&2; exit 2 ;; esac
for f in "$launcher" "$program"; do
  [[ -x "$f" ]] || { echo "many_ranks.sh: $f is missing (build ringfoldrun and load_many_ranks_rank)" >&2; exit 2; }
done

meminfo() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
avail0=$(meminfo MemAvailable)
shmem0=$(meminfo Shmem)
samples=$(mktemp)
output=$(mktemp)
trap 'rm -f "$samples" "$output"' EXIT
floor_kib=$(( ${MIN_AVAILABLE_MIB:-3072} * 1024 ))

start=$(date +%s%N)
rc=0
LOAD_T0_NS=$start RINGFOLD_LOCAL_TRANSPORT=$backend \
  "$launcher" -np "$n" --start-timeout "${START_TIMEOUT:-120}" "$program" "${ELEMENTS:-65536}" >"$output" 2>&1 &
launched=$!
# The sampler, and a guard for a shared machine: below MIN_AVAILABLE_MIB (3072) of available
# memory the job is stopped (SIGTERM to ringfoldrun, which stops its ranks) before the kernel's
# OOM killer picks a victim, perhaps someone else's process.
( while kill -0 "$launched" 2>/dev/null; do
    avail=$(meminfo MemAvailable)
    echo "$avail $(meminfo Shmem)"
    if (( avail < floor_kib )); then
      echo "many_ranks.sh: only $(( avail / 1024 )) MiB of memory left available: stopping the job" >&2
      kill -TERM "$launched" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done ) >"$samples" &
sampler=$!
wait "$launched" || rc=$?
cat "$output"
if [[ $rc -eq 0 ]] && ! grep -q "many_ranks ok ranks=$n " "$output"; then
  echo "many_ranks.sh: ringfoldrun exited 0 but rank 0 did not report its check" >&2
  rc=1
fi
end=$(date +%s%N)
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true

read -r used shm < <(awk -v a="$avail0" -v s="$shmem0" \
  'BEGIN { u = 0; m = 0 } { if (a - $1 > u) u = a - $1; if ($2 - s > m) m = $2 - s }
   END { printf "%d %d\n", u / 1024, m / 1024 }' "$samples")
echo "many_ranks.sh: $n ranks over $backend: exit $rc, launcher wall $(( (end - start) / 1000000 )) ms," \
     "peak memory in use +${used} MiB (MemAvailable drop; other processes included), Shmem +${shm} MiB"
exit "$rc"
