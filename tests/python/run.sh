#!/usr/bin/env bash
# Runs the Python tests under ringfoldrun with NP ranks, against the installed wheel.
#   tests/python/run.sh NP [pytest args...]
#   tests/python/run.sh plain      the numpy-only tests in a venv without any framework
#   tests/python/run.sh torchrun   two ranks started by torchrun instead of ringfoldrun, with
#                                  MASTER_PORT + 1 taken by another process
#   tests/python/run.sh peer-death a rank dies: the others get HorovodInternalError in time
# Needs scripts/python_package.sh to have installed the wheel into ${BUILD_DIR:-build}/python-site
# (scripts/test.sh does). A collective that stalls fails after 20 s instead of hanging.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$root/build}
site="$build/python-site"
np=${1:?usage: tests/python/run.sh NP|plain [pytest args]}
shift
[[ -x "$site/bin/ringfoldrun" ]] || { echo "tests/python/run.sh: no installed package in $site; run scripts/python_package.sh" >&2; exit 1; }
export PYTHONPATH="$site" RINGFOLD_STALL_SHUTDOWN_TIME=20 RINGFOLD_STALL_CHECK_TIME=10 PYTHONDONTWRITEBYTECODE=1
cd "$root"
if [[ "$np" == plain ]]; then
  venv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-plain.txt")
  exec "$site/bin/ringfoldrun" -np 2 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    "$here/test_plain_numpy.py" "$@"
fi
venv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-test.txt")
if [[ "$np" == peer-death ]]; then
  RINGFOLD_TIMEOUT=5 exec "$site/bin/ringfoldrun" -np 3 "$venv/bin/python" "$here/peer_death.py" "$@"
fi
if [[ "$np" == torchrun ]]; then
  # torchrun's store takes MASTER_PORT; pick it, and MASTER_PORT + 1 for the holder below, free
  # and below the ephemeral range, so parallel tests' outgoing connections cannot hold them.
  port=$("$venv/bin/python" - <<'PY'
import random, socket
for _ in range(200):
    p = random.randrange(20000, 30000, 2)
    try:
        for q in (p, p + 1):
            with socket.socket() as s:
                s.bind(('127.0.0.1', q))
        print(p)
        break
    except OSError:
        pass
PY
)
  # Another process holds MASTER_PORT + 1 (as a second job's torchrun store would): ringfold's
  # Python init must agree on another port through torchrun's store instead of failing.
  exec 3< <("$venv/bin/python" -c "
import socket, time
s = socket.socket(); s.bind(('0.0.0.0', $port + 1)); s.listen()
print('held', flush=True); time.sleep(600)")
  holder=$!
  trap 'kill $holder 2>/dev/null || true' EXIT
  read -r -t 20 -u 3 held && [[ $held == held ]] || { echo "tests/python/run.sh: cannot hold port $((port + 1))" >&2; exit 1; }
  "$venv/bin/torchrun" --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port" \
    -m pytest -q -p no:cacheprovider \
    "$here/test_plain_numpy.py" "$here/test_torch_training.py" "$@"
  exit $?
fi
exec "$site/bin/ringfoldrun" -np "$np" "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here" "$@"
