#!/usr/bin/env bash
# Builds the `ringfold` wheel (`pip wheel .`: scikit-build-core runs CMake) and installs it,
# with its `ringfoldrun` command, into ${BUILD_DIR:-build}/python-site, using the cached test
# virtual environment (scripts/pyenv.sh bindings/python/requirements-test.txt: torch, numpy,
# pytest, scikit-build-core). The venv itself is never modified, so one cache serves every clone.
#
#   scripts/python_package.sh        build and install; print the site directory
#
# Use it as:  PYTHONPATH=<site> <site>/bin/ringfoldrun -np 2 <venv>/bin/python train.py
# The wheel's CMake build lives in <build>/python-wheel/ (reused: a rebuild compiles only what
# changed). Extra CMake definitions: RINGFOLD_WHEEL_CMAKE_ARGS="-DRINGFOLD_WITH_CUDA=OFF".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
venv=$("$root/scripts/pyenv.sh" "$root/bindings/python/requirements-test.txt")
site="$build/python-site"
rm -rf "$build/wheel"
# The wheel's CMake build lives beside the build it belongs to (pyproject's default,
# build/python-wheel, would be shared by every BUILD_DIR).
config=(--config-settings="build-dir=$build/python-wheel/{wheel_tag}")
for arg in ${RINGFOLD_WHEEL_CMAKE_ARGS:-}; do
  config+=(--config-settings="cmake.args=$arg")
done
echo "scripts/python_package.sh: building the ringfold wheel" >&2
"$venv/bin/python" -m pip wheel --no-build-isolation --no-deps --no-cache-dir -q "${config[@]}" \
  "$root" -w "$build/wheel" >&2
rm -rf "$site"
"$venv/bin/python" -m pip install --no-deps --no-index -q --target "$site" "$build"/wheel/ringfold-*.whl >&2
echo "$site"
