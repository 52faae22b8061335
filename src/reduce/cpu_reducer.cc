#include "reduce/cpu_reducer.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/params.h"
#include "reduce/kernel_table.h"
#include "reduce/reducer_args.h"

#if defined(RINGFOLD_REDUCE_X86)
#include <cpuid.h>
#endif

namespace ringfold {
namespace {

using reduce_detail::KernelTable;

// Out-of-place reductions of at least this many bytes per operand use non-temporal stores:
// dst is written straight to memory instead of being read for ownership first (about 1.4x at
// 64 MiB on AVX-512). Below it (pipeline segments, cache-sized buffers) the result stays in cache
// for whoever reads it next; in place never streams (dst's lines are already loaded).
constexpr size_t kStreamMinBytes = size_t(4) << 20;

#if defined(RINGFOLD_REDUCE_X86)
// F16C (CPUID leaf 1, ECX bit 29), asked of cpuid itself: clang's __builtin_cpu_supports has
// no "f16c" before clang 16.
bool hasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
#endif

bool cpuSupports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable: return true;
#if defined(RINGFOLD_REDUCE_X86)
    case CpuIsa::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && hasF16c();
    case CpuIsa::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") && hasF16c();
#else
    case CpuIsa::kAvx2:
    case CpuIsa::kAvx512: return false;
#endif
  }
  return false;
}

const KernelTable& kernelsFor(CpuIsa isa) {
  switch (isa) {
#if defined(RINGFOLD_REDUCE_X86)
    case CpuIsa::kAvx512: return reduce_detail::avx512Kernels();
    case CpuIsa::kAvx2: return reduce_detail::avx2Kernels();
#endif
    default: return reduce_detail::portableKernels();
  }
}

class CpuReducer final : public Reducer {
 public:
  explicit CpuReducer(CpuIsa isa) : kernels_(kernelsFor(isa)) {}

  void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
              double postScale) override {
    if (!reduce_detail::checkReduceArgs("reducer", dst, a, b, count, dtype, op)) return;
    const int o = static_cast<int>(op == ReduceOp::kAvg ? ReduceOp::kSum : op);
    const size_t bytes = count * dataTypeSize(dtype);
    const int scaled = postScale != 1.0 ? 1 : 0;
    const int d = static_cast<int>(dtype);
    if (bytes >= kStreamMinBytes && dst != a && dst != b && kernels_.reduceStream[d][o][scaled]) {
      kernels_.reduceStream[d][o][scaled](dst, a, b, count, postScale);
      return;
    }
    kernels_.reduce[d][o][scaled](dst, a, b, count, postScale);
  }

  void scale(void* dst, const void* src, size_t count, DataType dtype, double factor) override {
    if (!reduce_detail::checkScaleArgs("reducer", dst, src, count, dtype)) return;
    const size_t bytes = count * dataTypeSize(dtype);
    if (factor == 1.0) {
      if (dst != src) std::memcpy(dst, src, bytes);
      return;
    }
    kernels_.scale[static_cast<int>(dtype)](dst, src, count, factor);
  }

 private:
  const KernelTable& kernels_;
};

}  // namespace

CpuIsa detectCpuIsa() {
  if (cpuSupports(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (cpuSupports(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kPortable;
}

const char* cpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable: return "portable";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

std::unique_ptr<Reducer> makeCpuReducer(CpuIsa isa) {
  RF_ENFORCE(isa == CpuIsa::kPortable || isa == CpuIsa::kAvx2 || isa == CpuIsa::kAvx512,
             "unknown CPU ISA ", static_cast<int>(isa));
  if (!cpuSupports(isa)) {
    RF_THROW(InvalidArgument, "CPU reducer path '", cpuIsaName(isa),
             "' is not supported by this CPU (best available: ", cpuIsaName(detectCpuIsa()), ")");
  }
  return std::make_unique<CpuReducer>(isa);
}

std::unique_ptr<Reducer> makeCpuReducer() {
  const std::string name = params::kCpuIsa.str();
  if (name == "auto" || name.empty()) return makeCpuReducer(detectCpuIsa());
  if (name == "avx512") return makeCpuReducer(CpuIsa::kAvx512);
  if (name == "avx2") return makeCpuReducer(CpuIsa::kAvx2);
  if (name == "portable") return makeCpuReducer(CpuIsa::kPortable);
  RF_THROW(InvalidArgument, "RINGFOLD_CPU_ISA='", name,
           "' is not one of auto, avx512, avx2, portable");
}

}  // namespace ringfold
