// CpuReducer: the Reducer for host memory, vectorised with run-time dispatch.
//
// At construction it picks the widest code path the CPU supports (AVX-512 with F16C/BF16
// conversions, AVX2+F16C, or portable C++), unless RINGFOLD_CPU_ISA names one. Every path gives
// bitwise-identical results (see reducer.h), which the tests check.
#pragma once

#include <memory>
#include <string>

#include "reduce/reducer.h"

namespace ringfold {

enum class CpuIsa { kPortable, kAvx2, kAvx512 };

// The best ISA this CPU supports, ignoring RINGFOLD_CPU_ISA.
CpuIsa detectCpuIsa();
const char* cpuIsaName(CpuIsa isa);

// isa: the path to use; std::nullopt-like default reads RINGFOLD_CPU_ISA (auto = detect).
// Throws InvalidArgument if the requested path is not supported by this CPU.
std::unique_ptr<Reducer> makeCpuReducer();
std::unique_ptr<Reducer> makeCpuReducer(CpuIsa isa);

}  // namespace ringfold
