// The portable path: reduce_kernels.h over ScalarSimd, built for the baseline ISA (SSE2 on x86-64).
#include "reduce/simd_scalar.h"

#define RF_ISA_NS portable
#define RF_TABLE_FN portableKernels
#define RF_INT_VEC_BYTES 16

namespace ringfold::reduce_detail::portable {
using Simd = ScalarSimd;
}

#include "reduce/reduce_kernels.h"
