// The portable path: reduce_kernels.h over PortableSimd (GCC vector extensions, no intrinsics),
// built for the baseline ISA of the target (SSE2 on x86-64).
#include "reduce/simd_portable.h"

#define RF_ISA_NS portable
#define RF_TABLE_FN portableKernels
#define RF_INT_VEC_BYTES 16

namespace ringfold::reduce_detail::portable {
using Simd = PortableSimd;
}

#include "reduce/reduce_kernels.h"
