// The AVX-512 path: reduce_kernels.h over Avx512Simd. Built with -mavx512f -mavx512bw
// -mavx512vl -mavx2 -mf16c (no FMA).
#include "reduce/simd_avx512.h"

#define RF_ISA_NS avx512
#define RF_TABLE_FN avx512Kernels
#define RF_INT_VEC_BYTES 64

namespace ringfold::reduce_detail::avx512 {
using Simd = Avx512Simd;
}

#include "reduce/reduce_kernels.h"
