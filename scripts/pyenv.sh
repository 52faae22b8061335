#!/usr/bin/env bash
# A Python virtual environment built from one requirements file, installed from PyPI once into a
# cache outside the clone and reused by every later run, offline.
#
#   scripts/pyenv.sh REQS             create it if missing (idempotent), print its directory
#   scripts/pyenv.sh REQS run CMD...  create it if missing, then run CMD with its bin/ first on PATH
#
# Location: ${XDG_CACHE_HOME:-~/.cache}/ringfold/venv-<key>, where <key> hashes the requirements
# file and the Python version: editing the requirements (or moving to another Python) builds a
# fresh one beside the old. Creation happens under a lock and is marked complete only at the
# end, so a parallel or interrupted run never uses half a venv. If PyPI cannot be reached, it
# fails loudly (exit 1) naming the file it could not install; nothing that needs it passes
# without it.
#
# Layering: a requirements file with a line `# pyenv-base: OTHER.txt` (a path relative to the
# file) gets a venv over OTHER's venv instead of a standalone one: OTHER's venv is made first
# (as above), a .pth file puts its site-packages on the new venv's sys.path (after the new
# venv's own), and pip installs only what OTHER's venv does not already satisfy, with OTHER as a
# constraints file, so it never downloads a second copy of, e.g., torch: a requirement that
# would need another version of one of OTHER's pins fails instead. The key then hashes both
# files (through OTHER's venv path), so editing either builds a fresh one.
set -euo pipefail
req=${1:?usage: scripts/pyenv.sh REQUIREMENTS [run CMD...]}
shift
[[ -f "$req" ]] || { echo "scripts/pyenv.sh: no requirements file '$req'" >&2; exit 1; }
python=${PYTHON:-python3}

command -v "$python" >/dev/null || { echo "scripts/pyenv.sh: $python not found (scripts/install_deps.sh installs python3)" >&2; exit 1; }
pyver=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
base_req=$(sed -n 's/^# pyenv-base: *\([^ ]*\) *$/\1/p' "$req" | head -n 1)
base_venv=
if [[ -n "$base_req" ]]; then
  [[ "$base_req" == /* ]] || base_req="$(cd "$(dirname "$req")" && pwd)/$base_req"
  base_venv=$(bash "${BASH_SOURCE[0]}" "$base_req")
fi
key=$( { cat "$req"; echo "python $pyver"; [[ -z "$base_venv" ]] || echo "base $base_venv"; } |
       sha256sum | cut -c1-16)
venv=${XDG_CACHE_HOME:-$HOME/.cache}/ringfold/venv-$key

if [[ ! -f "$venv/.complete" ]]; then
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9
  if [[ ! -f "$venv/.complete" ]]; then
    echo "scripts/pyenv.sh: creating $venv (from $req, Python $pyver)" >&2
    rm -rf "$venv"
    if ! "$python" -m venv "$venv" >&2; then
      echo "scripts/pyenv.sh: '$python -m venv' failed; on Debian: apt-get install python3-venv" >&2
      rm -rf "$venv"
      exit 1
    fi
    pip_args=(-r "$req")
    if [[ -n "$base_venv" ]]; then
      # The base venv's site-packages as site dirs (their own .pth files apply) after this
      # venv's own: site.py runs .pth lines that start with `import` after adding this venv.
      site_dir=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      "$base_venv/bin/python" -c 'import sysconfig; p = sysconfig.get_paths()
dirs = dict.fromkeys((p["purelib"], p["platlib"]))
print("import site; " + "; ".join("site.addsitedir(%r)" % d for d in dirs))' \
        >"$site_dir/_pyenv_base.pth"
      pip_args+=(-c "$base_req")
    fi
    # Bounded: a registry that does not answer fails within minutes instead of hanging.
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
         --timeout 60 --retries 3 "${pip_args[@]}" >&2; then
      hint=${base_req:+ Do its pins agree with $base_req?}
      echo "scripts/pyenv.sh: could not install $req from PyPI (is it reachable?)$hint" >&2
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
