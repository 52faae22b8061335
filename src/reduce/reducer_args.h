// Argument checks of reducer.h's contract, shared by the CPU reducer and the CUDA reducer
// (kernels/cuda_reducer.h) so both refuse the same calls with the same messages.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace ringfold::reduce_detail {

// reduce(): throws InvalidArgument for kBool or unknown dtype/op codes, null buffers with
// count > 0, or dst partially overlapping a or b (dst == a or dst == b is allowed).
// Returns false when there is nothing to do (count 0). `who` prefixes the messages.
bool checkReduceArgs(const char* who, const void* dst, const void* a, const void* b, size_t count,
                     DataType dtype, ReduceOp op);
// scale(): the same for dst and src (dst == src is allowed).
bool checkScaleArgs(const char* who, const void* dst, const void* src, size_t count, DataType dtype);

}  // namespace ringfold::reduce_detail
