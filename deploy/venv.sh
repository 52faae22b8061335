#!/usr/bin/env bash
# The Python virtual environment of the deploy/ checks (tests/deploy): kubernetes-validate and
# its dependencies from deploy/requirements.txt, installed from PyPI once into a cache outside
# the clone and reused by every later run, offline.
#
#   deploy/venv.sh             create it if missing (idempotent), print its directory
#   deploy/venv.sh run CMD...  create it if missing, then run CMD with its bin/ first on PATH
#
# Location: ${RINGFOLD_DEPLOY_VENV:-${XDG_CACHE_HOME:-~/.cache}/ringfold/venv-<key>}, where <key>
# hashes deploy/requirements.txt and the Python version: editing the requirements (or moving
# to another Python) builds a fresh one beside the old. Creation happens under a lock and is
# marked complete only at the end, so a parallel or interrupted run never uses half a venv.
# If PyPI cannot be reached, it fails loudly (exit 1) naming what it could not install; the
# checks never pass without it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
req="$here/requirements.txt"
python=${PYTHON:-python3}

command -v "$python" >/dev/null || { echo "deploy/venv.sh: $python not found (scripts/install_deps.sh installs python3)" >&2; exit 1; }
pyver=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
key=$( { cat "$req"; echo "python $pyver"; } | sha256sum | cut -c1-16)
venv=${RINGFOLD_DEPLOY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ringfold/venv-$key}

if [[ ! -f "$venv/.complete" ]]; then
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9
  if [[ ! -f "$venv/.complete" ]]; then
    echo "deploy/venv.sh: creating $venv (from deploy/requirements.txt, Python $pyver)" >&2
    rm -rf "$venv"
    if ! "$python" -m venv "$venv" >&2; then
      echo "deploy/venv.sh: '$python -m venv' failed; on Debian: apt-get install python3-venv" >&2
      rm -rf "$venv"
      exit 1
    fi
    # Bounded: a registry that does not answer fails within about a minute instead of hanging.
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
         --timeout 20 --retries 2 -r "$req" >&2; then
      echo "deploy/venv.sh: could not install deploy/requirements.txt from PyPI (is it reachable?);" \
           "the Kubernetes manifest checks need kubernetes-validate and cannot run without it" >&2
      rm -rf "$venv"
      exit 1
    fi
    touch "$venv/.complete"
  fi
  exec 9>&-
fi

if [[ "${1:-}" == run ]]; then
  shift
  export PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv"
  exec "$@"
fi
echo "$venv"
