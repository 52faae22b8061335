#!/usr/bin/env bash
# examples/pytorch_train.py: one process, then 4 ranks under the wheel's ringfoldrun; the 4-rank
# run must reach the single-process test accuracy within 2 points (issue 4's criterion).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$root/build}
site="$build/python-site"
[[ -x "$site/bin/ringfoldrun" ]] || { echo "example_test.sh: no installed package in $site; run scripts/python_package.sh" >&2; exit 1; }
venv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-test.txt")
export PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 RINGFOLD_STALL_SHUTDOWN_TIME=30
ckpt=$(mktemp -d)
trap 'rm -rf "$ckpt"' EXIT
accuracy() { sed -n 's/.*final test accuracy: \([0-9.]*\).*/\1/p' | tail -1; }
single=$("$venv/bin/python" "$root/examples/pytorch_train.py" --checkpoint-dir "$ckpt/1" | tee /dev/stderr | accuracy)
multi=$("$site/bin/ringfoldrun" -np 4 "$venv/bin/python" "$root/examples/pytorch_train.py" \
        --checkpoint-dir "$ckpt/4" | tee /dev/stderr | accuracy)
echo "single process: $single, 4 ranks: $multi"
[[ -n "$single" && -n "$multi" ]] || { echo "example_test.sh: no 'final test accuracy' line" >&2; exit 1; }
ls "$ckpt/4"/checkpoint-* >/dev/null || { echo "example_test.sh: rank 0 wrote no checkpoint" >&2; exit 1; }
python3 -c "import sys; s, m = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if m >= s - 0.02 else 1)" "$single" "$multi" \
  || { echo "example_test.sh: 4 ranks reached $multi, more than 2 points below one process ($single)" >&2; exit 1; }
