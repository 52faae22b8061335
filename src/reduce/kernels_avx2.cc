// The AVX2 + F16C path: reduce_kernels.h over Avx2Simd. Built with -mavx2 -mf16c (no FMA).
#include "reduce/simd_avx2.h"

#define RF_ISA_NS avx2
#define RF_TABLE_FN avx2Kernels
#define RF_INT_VEC_BYTES 32

namespace ringfold::reduce_detail::avx2 {
using Simd = Avx2Simd;
}

#include "reduce/reduce_kernels.h"
