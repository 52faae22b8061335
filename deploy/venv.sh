#!/usr/bin/env bash
# The Python virtual environment of the deploy/ checks (tests/deploy): kubernetes-validate and
# its dependencies from deploy/requirements.txt, cached outside the clone by scripts/pyenv.sh.
#
#   deploy/venv.sh             create it if missing (idempotent), print its directory
#   deploy/venv.sh run CMD...  create it if missing, then run CMD with its bin/ first on PATH
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../scripts/pyenv.sh" "$here/requirements.txt" "$@"
