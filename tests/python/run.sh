#!/usr/bin/env bash
# Runs the Python tests under ringfoldrun with NP ranks, against the installed wheel.
#   tests/python/run.sh NP [pytest args...]
#   tests/python/run.sh plain      the numpy-only tests in a venv without any framework
#   tests/python/run.sh torchrun   two ranks started by torchrun instead of ringfoldrun, with
#                                  MASTER_PORT + 1 taken by another process
#   tests/python/run.sh peer-death a rank dies: the others get HorovodInternalError in time
#   tests/python/run.sh c10d NP          the torch.distributed backend "ringfold"
#                                        (test_torch_distributed*.py) under ringfoldrun -np NP
#   tests/python/run.sh c10d-torchrun NP the same under torchrun, MASTER_PORT + 1 held by another
#                                        process (ringfold's store must go elsewhere)
#   tests/python/run.sh c10d-env NP      the same with plain env:// variables (MASTER_ADDR,
#                                        MASTER_PORT, RANK, WORLD_SIZE, as Azure ML sets them and
#                                        no LOCAL_RANK), ranks started here, MASTER_PORT + 1 held
#   tests/python/run.sh c10d-death       3 ranks with env:// variables; the last SIGKILLs itself
#   tests/python/run.sh gpu-dropins      gpu_dropins.py's CPU stand-in (gloo for NCCL, 2 ranks)
#   tests/python/run.sh deepspeed  DeepSpeed ZeRO 1/2/3 on CPU over backend "ringfold" against
#                                  "gloo" (one pytest process starting its own 2-rank jobs)
#   tests/python/run.sh elastic    ringfold.torch.elastic (test_torch_elastic.py): one pytest process
#                                  starting its own jobs under ringfoldrun's elastic mode
#                                  ($RINGFOLDRUN, else $BUILD_DIR/ringfoldrun) and torchrun
# Needs scripts/python_package.sh to have installed the wheel into ${BUILD_DIR:-build}/python-site
# (scripts/test.sh does). A collective that stalls fails after 20 s instead of hanging.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$root/build}
site="$build/python-site"
np=${1:?usage: tests/python/run.sh NP|plain|torchrun|peer-death|c10d*|c10d-death [NP] [pytest args]}
shift
[[ -x "$site/bin/ringfoldrun" ]] || { echo "tests/python/run.sh: no installed package in $site; run scripts/python_package.sh" >&2; exit 1; }
export PYTHONPATH="$site" RINGFOLD_STALL_SHUTDOWN_TIME=20 RINGFOLD_STALL_CHECK_TIME=10 PYTHONDONTWRITEBYTECODE=1
cd "$root"
if [[ "$np" == plain ]]; then
  venv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-plain.txt")
  exec "$site/bin/ringfoldrun" -np 2 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    "$here/test_plain_numpy.py" "$@"
fi
# --- deepspeed mode (test_deepspeed_zero.py) ---
if [[ "$np" == deepspeed ]]; then
  # Its own venv, layered over the torch one (scripts/pyenv.sh); not under ringfoldrun: the test
  # starts its jobs itself (torchrun, ringfoldrun, DeepSpeed's launcher). The conftest's ringfold
  # engine is for tests that run as ranks, hence --noconftest.
  venv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-deepspeed.txt")
  exec "$venv/bin/python" -m pytest -q -p no:cacheprovider --noconftest \
    "$here/test_deepspeed_zero.py" "$@"
fi
# --- end deepspeed mode ---
# --- spark modes (test_spark.py, test_spark_cluster.py: ringfold.spark) ---
#   tests/python/run.sh spark          run/HorovodRunner on a local[4] session (this pytest is the
#                                      Spark driver; its jobs start their ranks themselves)
#   tests/python/run.sh spark-cluster  one job on local-cluster[2,1,1024] (2 executor JVMs; slow)
# In the venv of requirements-spark.txt (pyspark over the torch venv); Java from install_deps.sh.
if [[ "$np" == spark || "$np" == spark-cluster ]]; then
  venv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-spark.txt")
  file=test_spark.py
  [[ "$np" == spark ]] || file=test_spark_cluster.py
  exec "$venv/bin/python" -m pytest -q -p no:cacheprovider --noconftest \
    -o 'markers=slow: starts its own multi-JVM Spark session' "$here/$file" "$@"
fi
# --- end spark modes ---
# --- tensorflow / keras modes (test_tensorflow*.py, test_keras.py, examples/keras_train.py) ---
#   tests/python/run.sh tensorflow NP    ringfold.tensorflow and ringfold.keras (TF backend) under
#                                        ringfoldrun -np NP, in the venv of requirements-tensorflow.txt
#   tests/python/run.sh tf-config        3 ranks started by hand with only TF_CONFIG (chief + 2 workers)
#   tests/python/run.sh keras-example NP examples/keras_train.py: 1 process, then NP ranks, within 2 points
#   tests/python/run.sh keras-torch NP   test_keras.py with KERAS_BACKEND=torch (requirements-keras-torch.txt)
#   tests/python/run.sh tensorflow-jobs  test_tensorflow_jobs.py (not a rank: it starts its own TF_CONFIG
#                                        jobs): a killed rank, and the collective-order deadlock case
case "$np" in
  tensorflow|tf-config|keras-example|tensorflow-jobs)
    tfvenv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-tensorflow.txt")
    export TF_CPP_MIN_LOG_LEVEL=2 KERAS_BACKEND=tensorflow ;;
esac
if [[ "$np" == tensorflow ]]; then
  n=${1:?usage: tests/python/run.sh tensorflow NP}; shift
  exec "$site/bin/ringfoldrun" -np "$n" "$tfvenv/bin/python" -m pytest -q -p no:cacheprovider \
    "$here/test_tensorflow.py" "$here/test_keras.py" "$@"
fi
if [[ "$np" == tensorflow-jobs ]]; then
  exec "$tfvenv/bin/python" -m pytest -q -p no:cacheprovider "$here/test_tensorflow_jobs.py" "$@"
fi
if [[ "$np" == tf-config ]]; then
  port=$("$tfvenv/bin/python" -c "
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
        pass")
  cluster="{\"chief\": [\"127.0.0.1:$port\"], \"worker\": [\"127.0.0.1:$((port + 2))\", \"127.0.0.1:$((port + 4))\"]}"
  pids=()
  for task in '"chief", "index": 0' '"worker", "index": 0' '"worker", "index": 1'; do
    TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": $task}}" RINGFOLD_TEST_TF_CONFIG=1 \
      timeout 120 "$tfvenv/bin/python" -m pytest -q -p no:cacheprovider "$here/test_tensorflow_tf_config.py" "$@" \
      > >(sed "s/^/[${task%%,*}] /") 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  exit $rc
fi
if [[ "$np" == keras-example ]]; then
  n=${1:?usage: tests/python/run.sh keras-example NP}; shift
  accuracy() { sed -n 's/.*final test accuracy: \([0-9.]*\).*/\1/p' | tail -1; }
  single=$("$tfvenv/bin/python" "$root/examples/keras_train.py" | tee /dev/stderr | accuracy)
  multi=$("$site/bin/ringfoldrun" -np "$n" "$tfvenv/bin/python" "$root/examples/keras_train.py" | tee /dev/stderr | accuracy)
  echo "single process: $single, $n ranks: $multi"
  [[ -n "$single" && -n "$multi" ]] || { echo "run.sh keras-example: no 'final test accuracy' line" >&2; exit 1; }
  "$tfvenv/bin/python" -c "import sys; s, m = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if m >= s - 0.02 else 1)" \
    "$single" "$multi" || { echo "run.sh keras-example: $n ranks reached $multi, more than 2 points below one process ($single)" >&2; exit 1; }
  exit 0
fi
if [[ "$np" == keras-torch ]]; then
  n=${1:?usage: tests/python/run.sh keras-torch NP}; shift
  ktvenv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-keras-torch.txt")
  KERAS_BACKEND=torch exec "$site/bin/ringfoldrun" -np "$n" "$ktvenv/bin/python" -m pytest -q -p no:cacheprovider \
    "$here/test_keras.py" "$@"
fi
# --- end tensorflow / keras modes ---
venv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-test.txt")
# --- elastic mode (test_torch_elastic.py) ---
# Not under a launcher: the tests start their jobs themselves, hence --noconftest.
if [[ "$np" == elastic ]]; then
  BUILD_DIR="$build" exec "$venv/bin/python" -m pytest -q -p no:cacheprovider --noconftest \
    "$here/test_torch_elastic.py" "$@"
fi
# --- end elastic mode ---
if [[ "$np" == peer-death ]]; then
  RINGFOLD_TIMEOUT=5 exec "$site/bin/ringfoldrun" -np 3 "$venv/bin/python" "$here/peer_death.py" "$@"
fi
# A free even port P with P + 1 free too, below the ephemeral range.
free_port_pair() {
  "$venv/bin/python" - <<'PY'
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
}
# Holds port $1 in a background process until this script exits.
hold_port() {
  exec 3< <("$venv/bin/python" -c "
import socket, time
s = socket.socket(); s.bind(('0.0.0.0', $1)); s.listen()
print('held', flush=True); time.sleep(600)")
  holder=$!
  trap 'kill $holder 2>/dev/null || true' EXIT
  if ! { read -r -t 20 -u 3 held && [[ $held == held ]]; }; then
    echo "tests/python/run.sh: cannot hold port $1" >&2
    exit 1
  fi
}
# Starts $1 ranks with plain env:// variables running pytest on the remaining arguments; every
# rank's output is prefixed with its rank. Fails if any rank fails, except that rank $victim (if
# set) must have been killed by SIGKILL.
run_env_ranks() {
  local n=$1 port rc=0 i status
  shift
  port=$(free_port_pair)
  hold_port $((port + 1))
  local pids=()
  for ((i = 0; i < n; i++)); do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$i WORLD_SIZE=$n \
      timeout 240 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" > >(sed "s/^/[rank $i] /") 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < n; i++)); do
    status=0
    wait "${pids[$i]}" || status=$?
    if [[ "${victim:-}" == "$i" ]]; then
      [[ $status == 137 ]] || { echo "tests/python/run.sh: rank $i was to be killed, exited $status" >&2; rc=1; }
    elif [[ $status != 0 ]]; then
      echo "tests/python/run.sh: rank $i exited $status" >&2
      rc=1
    fi
  done
  return $rc
}
c10d_tests=("$here/test_torch_distributed.py" "$here/test_torch_distributed_lifecycle.py")
case "$np" in
  c10d)
    n=${1:?usage: tests/python/run.sh c10d NP}; shift
    RINGFOLD_TEST_C10D=1 exec "$site/bin/ringfoldrun" -np "$n" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
      "${c10d_tests[@]}" "$@" ;;
  c10d-torchrun)
    n=${1:?usage: tests/python/run.sh c10d-torchrun NP}; shift
    port=$(free_port_pair)
    hold_port $((port + 1))
    RINGFOLD_TEST_C10D=1 "$venv/bin/torchrun" --nnodes 1 --nproc_per_node "$n" --master_addr 127.0.0.1 \
      --master_port "$port" -m pytest -q -p no:cacheprovider "${c10d_tests[@]}" "$@"
    exit $? ;;
  c10d-env)
    n=${1:?usage: tests/python/run.sh c10d-env NP}; shift
    RINGFOLD_TEST_C10D=1 run_env_ranks "$n" "${c10d_tests[@]}" "$@"
    exit $? ;;
  c10d-death)
    victim=2 RINGFOLD_TEST_C10D_DEATH=1 run_env_ranks 3 "$here/test_torch_distributed_death.py" "$@"
    exit $? ;;
  gpu-dropins)
    # The GPU machine's check of the NCCL drop-ins and the backend on CUDA tensors
    # (gpu_dropins.py, run there by scripts/gpu_bundle.sh's gpu_check.sh); here its CPU stand-in
    # (gloo for NCCL), so that the script itself stays working.
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    "$venv/bin/python" "$here/gpu_dropins.py" --device cpu --out "$out" "$@"
    exit $? ;;
esac
if [[ "$np" == torchrun ]]; then
  # torchrun's store takes MASTER_PORT; another process holds MASTER_PORT + 1 (as a second job's
  # torchrun store would): ringfold's Python init must agree on another port through torchrun's
  # store instead of failing.
  port=$(free_port_pair)
  hold_port $((port + 1))
  "$venv/bin/torchrun" --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port" \
    -m pytest -q -p no:cacheprovider \
    "$here/test_plain_numpy.py" "$here/test_torch_training.py" "$@"
  exit $?
fi
exec "$site/bin/ringfoldrun" -np "$np" "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here" "$@"
