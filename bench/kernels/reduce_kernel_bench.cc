// reduce_kernel_bench: throughput of the CUDA reduction and compression kernels next to
// device-to-device cudaMemcpy of the same size, measured in the same run and interleaved
// (copy, kernel, copy, kernel, ...), medians of --runs timings with CUDA events.
//
//   reduce_kernel_bench [--bytes 64M] [--runs 20] [--device 0]
//
// --bytes is the size of one float32 operand (16-bit rows use the same element count). GB/s
// counts bytes read + written: cudaMemcpy moves 2x its buffer, a reduce 3x (reads a and b,
// writes dst), compress reads 4 and writes 2 bytes per element, decompress the reverse.
// "ratio" = kernel GB/s / cudaMemcpy GB/s; the target is >= 0.90 for float32 and bfloat16 sum.
// Without a CUDA device it says why and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda_kernels.h"
#include "kernels/cuda_reducer.h"

using namespace ringfold;

namespace {

size_t parseBytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end != nullptr ? *end : 0) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "reduce_kernel_bench: %s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

float timeOnce(const std::function<cudaError_t()>& fn, cudaEvent_t start, cudaEvent_t stop) {
  check(cudaEventRecord(start, nullptr), "cudaEventRecord");
  check(fn(), "kernel");
  check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  return ms;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{64} << 20;
  int runs = 20, device = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--bytes")) bytes = parseBytes(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--runs")) runs = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--device")) device = std::atoi(argv[i + 1]);
    else { std::fprintf(stderr, "usage: reduce_kernel_bench [--bytes 64M] [--runs 20] [--device 0]\n"); return 2; }
  }
  std::string why;
  if (cudaDeviceCountOrWhy(&why) == 0) {
    std::printf("reduce_kernel_bench: no CUDA device (%s); nothing to measure\n", why.c_str());
    return 0;
  }
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  const size_t count = bytes / 4;
  void *a = nullptr, *b = nullptr, *d = nullptr, *temp = nullptr;
  float* scale = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMalloc(&d, bytes), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&scale), sizeof(float)), "cudaMalloc");
  check(cudaMemset(a, 0x3c, bytes), "cudaMemset");  // finite values in every format
  check(cudaMemset(b, 0x3b, bytes), "cudaMemset");
  size_t tempBytes = 0;
  check(cuda::compressAutoScale(nullptr, tempBytes, d, static_cast<float*>(a), count, cuda::HalfFormat::kFloat16,
                                1.0f, scale, nullptr), "size query");
  check(cudaMalloc(&temp, tempBytes), "cudaMalloc");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");

  struct Row {
    const char* name;
    double bytesMoved;
    std::function<cudaError_t()> fn;
  };
  const double fb = static_cast<double>(count) * 4, hb = static_cast<double>(count) * 2;
  auto red = [&](DataType dt, void* dst) {
    return [=] { return cuda::reduce(dst, a, b, count, dt, ReduceOp::kSum, 1.0, 1.0, nullptr); };
  };
  const std::vector<Row> rows = {
      {"float32 sum", 3 * fb, red(DataType::kFloat32, d)},
      {"float32 sum-inplace", 3 * fb, red(DataType::kFloat32, a)},
      {"bfloat16 sum", 3 * hb, red(DataType::kBfloat16, d)},
      {"float16 sum", 3 * hb, red(DataType::kFloat16, d)},
      {"float32 max", 3 * fb, [&] { return cuda::reduce(d, a, b, count, DataType::kFloat32, ReduceOp::kMax, 1, 1, nullptr); }},
      {"float32 sum *0.5", 3 * fb, [&] { return cuda::reduce(d, a, b, count, DataType::kFloat32, ReduceOp::kSum, 1, 0.5, nullptr); }},
      {"compress fp16", fb + hb, [&] { return cuda::compress(d, static_cast<float*>(a), count, cuda::HalfFormat::kFloat16, scale, nullptr); }},
      {"compress bf16", fb + hb, [&] { return cuda::compress(d, static_cast<float*>(a), count, cuda::HalfFormat::kBfloat16, scale, nullptr); }},
      {"compress fp16 auto-scale", fb + hb, [&] {
         return cuda::compressAutoScale(temp, tempBytes, d, static_cast<float*>(a), count, cuda::HalfFormat::kFloat16,
                                        1.0f, scale, nullptr);
       }},
      {"decompress fp16", fb + hb, [&] { return cuda::decompress(static_cast<float*>(d), b, count, cuda::HalfFormat::kFloat16, scale, nullptr); }},
  };
  std::printf("# reduce_kernel_bench: %s (sm_%d%d), %zu bytes per float32 operand, median of %d\n", prop.name,
              prop.major, prop.minor, bytes, runs);
  std::printf("# %-26s %12s %12s %12s %8s\n", "kernel", "kernel GB/s", "memcpy GB/s", "", "ratio");
  for (const Row& row : rows) {
    // memcpy of the same number of bytes the kernel moves, so both sides count read + write.
    const size_t copyBytes = static_cast<size_t>(row.bytesMoved / 2);
    auto copy = [&] { return cudaMemcpyAsync(d, a, std::min(copyBytes, bytes), cudaMemcpyDeviceToDevice, nullptr); };
    for (int w = 0; w < 3; ++w) { timeOnce(copy, start, stop); timeOnce(row.fn, start, stop); }
    std::vector<float> tc, tk;
    for (int r = 0; r < runs; ++r) {
      tc.push_back(timeOnce(copy, start, stop));
      tk.push_back(timeOnce(row.fn, start, stop));
    }
    const double copyGbs = 2.0 * static_cast<double>(std::min(copyBytes, bytes)) / (median(tc) * 1e-3) / 1e9;
    const double kernelGbs = row.bytesMoved / (median(tk) * 1e-3) / 1e9;
    std::printf("  %-26s %12.1f %12.1f %12s %8.2f\n", row.name, kernelGbs, copyGbs, "", kernelGbs / copyGbs);
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  cudaFree(temp);
  cudaFree(scale);
  return 0;
}
