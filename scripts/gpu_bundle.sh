#!/bin/bash
# Packs this build's GPU tests and benchmarks, with the libraries they need that a CUDA machine
# may lack (liburing, libfabric and its providers' dependencies), into .devrun/ (git-ignored
# through .git/info/exclude), with .devrun/gpu_check.sh to run there from the repository root:
#   bash scripts/gpu_bundle.sh            (after scripts/build.sh)
#   <on the GPU machine> OUT=/some/dir bash .devrun/gpu_check.sh
# gpu_check.sh runs the gpu-labelled gtest binaries, reduce_kernel_bench at 64 MiB and 4 MiB,
# tests/python/test_torch_cuda.py with 1 and 2 ranks (the machine's own torch and pytest), and,
# where this build has the NCCL drop-ins: the NCCL-API library on device buffers
# (nccl_api_device_test), the backend "ringfold" on CUDA tensors (test_torch_distributed.py -k
# cuda), and tests/python/gpu_dropins.py (torch over NVIDIA's NCCL, ringfold's libnccl.so.2
# preloaded, NCCL with ringfold's net plugin, NCCL's sockets, and the backend "ringfold"). About
# 6 minutes. Results from a run are in bench/results/cuda_h200.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
D=.devrun
grep -qx "/$D/" .git/info/exclude 2>/dev/null || echo "/$D/" >> .git/info/exclude
rm -rf "$D" && mkdir -p "$D/bin" "$D/lib"
cp "$BUILD"/tests/kernels/{kernels_gpu_test,staged_collectives_gpu_test,engine_gpu_test} \
   "$BUILD"/bench/{reduce_kernel_bench,all_reduce_perf} "$BUILD"/ringfoldrun "$D/bin/"
cp -L "$BUILD"/libringfold.so.0 "$D/lib/"
# The NCCL drop-ins, where built: the library in a folder of its own (named by path, never found
# on LD_LIBRARY_PATH by accident), the plugin with the other libraries.
if [[ -f "$BUILD"/nccl/libnccl.so.2 ]]; then
  mkdir -p "$D/nccl" && cp -L "$BUILD"/nccl/libnccl.so.2 "$D/nccl/"
  cp "$BUILD"/tests/bindings/nccl/nccl_api_device_test "$D/bin/"
fi
[[ -f "$BUILD"/libnccl-net-ringfold.so ]] && cp -L "$BUILD"/libnccl-net-ringfold.so "$D/lib/"
# Everything the binaries load beyond glibc, the C++ runtime and OpenSSL (newer on the GPU image).
for f in "$D"/bin/* "$D"/lib/libringfold.so.0; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libringfold|libcrypto|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$D/lib/"; done
strip --strip-debug "$D"/bin/* "$D"/lib/*
[[ -d "$D/nccl" ]] && strip --strip-debug "$D"/nccl/*
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
if [[ -x $B/nccl_api_device_test ]]; then
  echo "== nccl_api_device_test"
  LD_LIBRARY_PATH=$PWD/.devrun/nccl:$LD_LIBRARY_PATH timeout 200 $B/nccl_api_device_test > "$OUT/nccl_api_device_test.log" 2>&1
  grep -E "OK \]|FAILED|PASSED|SKIPPED \]|Failure" "$OUT/nccl_api_device_test.log" | head -20
fi
echo "== backend ringfold on CUDA tensors, 2 ranks"
RINGFOLD_TEST_C10D=1 timeout 150 $B/ringfoldrun -np 2 python3 -m pytest -q -p no:cacheprovider \
  tests/python/test_torch_distributed.py -k cuda 2>&1 | tail -n 15 | tee "$OUT/c10d_cuda.txt"
if [[ -f .devrun/nccl/libnccl.so.2 ]]; then
  echo "== drop-ins side by side (gpu_dropins.py)"
  timeout 420 python3 tests/python/gpu_dropins.py --nccl-lib .devrun/nccl/libnccl.so.2 \
    --net-plugin .devrun/lib/libnccl-net-ringfold.so --out "$OUT/dropins" 2>&1 | tee "$OUT/dropins.txt"
fi
RUN
du -sh "$D"
