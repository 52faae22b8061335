#!/bin/bash
# Packs this build's GPU tests and benchmarks, with the libraries they need that a CUDA machine
# may lack (liburing, libfabric and its providers' dependencies), into .devrun/ (git-ignored
# through .git/info/exclude), with .devrun/gpu_check.sh to run there from the repository root:
#   bash scripts/gpu_bundle.sh            (after scripts/build.sh)
#   <on the GPU machine> OUT=/some/dir bash .devrun/gpu_check.sh
# gpu_check.sh runs the gpu-labelled gtest binaries, reduce_kernel_bench at 64 MiB and 4 MiB, and
# tests/python/test_torch_cuda.py with 1 and 2 ranks (the machine's own torch and pytest).
# Results from a run are in bench/results/cuda_h200.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
D=.devrun
grep -qx "/$D/" .git/info/exclude 2>/dev/null || echo "/$D/" >> .git/info/exclude
rm -rf "$D" && mkdir -p "$D/bin" "$D/lib"
cp "$BUILD"/tests/kernels/{kernels_gpu_test,staged_collectives_gpu_test,engine_gpu_test} \
   "$BUILD"/bench/{reduce_kernel_bench,all_reduce_perf} "$BUILD"/ringfoldrun "$D/bin/"
cp -L "$BUILD"/libringfold.so.0 "$D/lib/"
# Everything the binaries load beyond glibc, the C++ runtime and OpenSSL (newer on the GPU image).
for f in "$D"/bin/* "$D"/lib/libringfold.so.0; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libringfold|libcrypto)\.so' |
  while read -r lib; do cp -L "$lib" "$D/lib/"; done
strip --strip-debug "$D"/bin/* "$D"/lib/*
cat > "$D/gpu_check.sh" <<'RUN'
#!/bin/bash
export LD_LIBRARY_PATH=$PWD/.devrun/lib RINGFOLD_LIBRARY=$PWD/.devrun/lib/libringfold.so.0
export PYTHONPATH=$PWD/bindings/python PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_check}; mkdir -p "$OUT"; B=.devrun/bin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/gpu.txt"
for t in kernels_gpu_test staged_collectives_gpu_test engine_gpu_test; do
  echo "== $t"; timeout 180 $B/$t > "$OUT/$t.log" 2>&1
  grep -E "OK \]|FAILED|PASSED|SKIPPED \]|Failure" "$OUT/$t.log" | head -40
done
echo "== reduce_kernel_bench"
timeout 120 $B/reduce_kernel_bench --bytes 64M --runs 20 2>&1 | tee "$OUT/reduce_kernel_bench.txt"
timeout 60 $B/reduce_kernel_bench --bytes 4M --runs 20 2>&1 | tee -a "$OUT/reduce_kernel_bench.txt"
echo "== torch, 1 rank"
timeout 120 python3 -m pytest -q -x tests/python/test_torch_cuda.py 2>&1 | tail -n 15 | tee "$OUT/torch1.txt"
echo "== torch, 2 ranks"
timeout 150 $B/ringfoldrun -np 2 python3 -m pytest -q tests/python/test_torch_cuda.py 2>&1 | tail -n 25 | tee "$OUT/torch2.txt"
RUN
du -sh "$D"
