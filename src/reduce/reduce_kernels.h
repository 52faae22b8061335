// The reduction kernels, written once as templates over a Simd type (simd_portable.h,
// simd_avx2.h, simd_avx512.h; simd_scalar.h for tails) and compiled once per ISA:
// kernels_float.h and kernels_int.h hold the kernels, this file the table a TU exports.
//
// Include this only from a kernels_<isa>.cc that first defines:
//   RF_ISA_NS          a namespace name unique to the translation unit (portable, avx2, avx512)
//   RF_TABLE_FN        the getter it exports (portableKernels, avx2Kernels, avx512Kernels)
//   RF_INT_VEC_BYTES   the integer vector width in bytes (16, 32, 64)
//   ringfold::reduce_detail::RF_ISA_NS::Simd   the float vector type
// Everything else has internal linkage (anonymous namespaces, static inline half.h), so the
// linker never hands one ISA's code to another; no std:: template is instantiated out of line.
#pragma once

#include "reduce/kernel_table.h"
#include "reduce/kernels_float.h"
#include "reduce/kernels_int.h"

namespace ringfold::reduce_detail::RF_ISA_NS {
namespace {

template <class S, Fmt F, class Op, int kOp>
void fillFloatOp(KernelTable& t, DataType d) {
  const int di = static_cast<int>(d);
  t.reduce[di][kOp][0] = &reduceFloat<S, F, Op, false>;
  t.reduce[di][kOp][1] = &reduceFloat<S, F, Op, true>;
  if constexpr (S::kStream) {
    t.reduceStream[di][kOp][0] = &reduceFloat<S, F, Op, false, true>;
    t.reduceStream[di][kOp][1] = &reduceFloat<S, F, Op, true, true>;
  }
}

template <class S, Fmt F>
void fillFloat(KernelTable& t, DataType d) {
  fillFloatOp<S, F, FSum, 0>(t, d);
  fillFloatOp<S, F, FProd, 1>(t, d);
  fillFloatOp<S, F, FMax, 2>(t, d);
  fillFloatOp<S, F, FMin, 3>(t, d);
  t.scale[static_cast<int>(d)] = &scaleFloat<S, F>;
}

template <class S, class T, class Op, int kOp>
void fillIntOp(KernelTable& t, DataType d) {
  const int di = static_cast<int>(d);
  t.reduce[di][kOp][0] = &reduceInt<S, T, Op, false>;
  t.reduce[di][kOp][1] = &reduceInt<S, T, Op, true>;
  if constexpr (S::kStream) t.reduceStream[di][kOp][0] = &reduceInt<S, T, Op, false, true>;
}

template <class S, class T>
void fillInt(KernelTable& t, DataType d) {
  fillIntOp<S, T, ISum, 0>(t, d);
  fillIntOp<S, T, IProd, 1>(t, d);
  fillIntOp<S, T, IMax, 2>(t, d);
  fillIntOp<S, T, IMin, 3>(t, d);
  t.scale[static_cast<int>(d)] = &scaleInt<T>;
}

KernelTable makeTable() {
  KernelTable t{};
  fillInt<Simd, int8_t>(t, DataType::kInt8);
  fillInt<Simd, uint8_t>(t, DataType::kUint8);
  fillInt<Simd, int32_t>(t, DataType::kInt32);
  fillInt<Simd, uint32_t>(t, DataType::kUint32);
  fillInt<Simd, int64_t>(t, DataType::kInt64);
  fillInt<Simd, uint64_t>(t, DataType::kUint64);
  fillFloat<Simd, Fmt::kHalf>(t, DataType::kFloat16);
  fillFloat<Simd, Fmt::kBf16>(t, DataType::kBfloat16);
  fillFloat<Simd, Fmt::kF32>(t, DataType::kFloat32);
  fillFloat<Simd, Fmt::kF64>(t, DataType::kFloat64);
  // 8-bit floats: scalar on every path (a few integer operations per element each way; the
  // NCCL-compatible library's host mode is their only CPU user).
  fillFloat<ScalarSimd, Fmt::kE4m3>(t, DataType::kFloat8e4m3);
  fillFloat<ScalarSimd, Fmt::kE5m2>(t, DataType::kFloat8e5m2);
  return t;
}

}  // namespace
}  // namespace ringfold::reduce_detail::RF_ISA_NS

namespace ringfold::reduce_detail {
const KernelTable& RF_TABLE_FN() {
  static const KernelTable table = RF_ISA_NS::makeTable();
  return table;
}
}  // namespace ringfold::reduce_detail
