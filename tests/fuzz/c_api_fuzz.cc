// Fuzz target: the C ABI's argument checking (bindings/c/ringfold.h, ringfold_enqueue), which
// every framework plugin calls with whatever its users pass.
//
// One single-process engine serves every input. Each input describes one operation: its type,
// reduce op, scales, root, splits, process set, and a tensor's dtype, device, stream and shape
// (any int64 values). The tensor's data is a real buffer when the shape's bytes fit it and NULL
// otherwise, so a claim of more bytes than were given must be refused.
// Checks: an enqueue that fails says why (ringfold_last_error) and returns a documented code;
// one that succeeds completes within 10 s (never hangs) with OK or an error that says why,
// and its handle is released; a NULL buffer for a tensor with elements is never accepted.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bindings/c/ringfold.h"
#include "fuzz_support.h"

namespace fz = ringfold::fuzz;

namespace {

constexpr const char* kTarget = "c_api_fuzz";
constexpr size_t kBufferBytes = 1 << 16;
alignas(64) unsigned char gInput[kBufferBytes];
alignas(64) unsigned char gOutput[kBufferBytes];

size_t elementBytes(int dtype) {
  switch (dtype) {
    case RINGFOLD_INT8: case RINGFOLD_UINT8: case RINGFOLD_BOOL:
    case RINGFOLD_FLOAT8_E4M3: case RINGFOLD_FLOAT8_E5M2: return 1;
    case RINGFOLD_FLOAT16: case RINGFOLD_BFLOAT16: return 2;
    case RINGFOLD_INT32: case RINGFOLD_UINT32: case RINGFOLD_FLOAT32: return 4;
    case RINGFOLD_INT64: case RINGFOLD_UINT64: case RINGFOLD_FLOAT64: return 8;
    default: return 0;
  }
}

// The tensor's bytes, or 0 when a dimension is negative or the product overflows or exceeds
// the buffer (the data pointer is then NULL and must be refused unless the tensor is empty).
size_t bytesOf(const std::vector<int64_t>& shape, int dtype, bool& empty) {
  unsigned __int128 n = 1;
  empty = false;
  for (int64_t d : shape) {
    if (d < 0) return 0;
    if (d == 0) empty = true;
    n *= static_cast<uint64_t>(d);
    if (n > kBufferBytes) n = kBufferBytes + 1;  // saturate
  }
  const unsigned __int128 bytes = empty ? 0 : n * elementBytes(dtype);
  return bytes <= kBufferBytes ? static_cast<size_t>(bytes) : 0;
}

bool documented(int status) {
  return status == RINGFOLD_UNKNOWN_ERROR || status == RINGFOLD_PRECONDITION_ERROR ||
         status == RINGFOLD_ABORTED || status == RINGFOLD_INVALID_ARGUMENT;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("RINGFOLD_LOG_LEVEL", "fatal", 1);
  if (ringfold_init(nullptr, 0, nullptr, nullptr, 0) != RINGFOLD_OK) {
    std::fprintf(stderr, "c_api_fuzz: init failed: %s\n", ringfold_last_error());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  ringfold_op_t op{};
  static const int kTypes[] = {RINGFOLD_ALLREDUCE, RINGFOLD_ALLGATHER, RINGFOLD_BROADCAST, RINGFOLD_JOIN,
                               RINGFOLD_ALLTOALL, RINGFOLD_BARRIER, RINGFOLD_REDUCESCATTER, RINGFOLD_REDUCE,
                               4, 9, -1};
  op.type = in.ConsumeBool() ? in.PickValueInArray(kTypes) : in.ConsumeIntegral<int>();
  op.reduce_op = in.ConsumeIntegralInRange<int>(-1, 7);
  op.prescale = in.ConsumeBool() ? 1.0 : in.ConsumeFloatingPoint<double>();
  op.postscale = in.ConsumeBool() ? 1.0 : in.ConsumeFloatingPoint<double>();
  op.root = in.ConsumeIntegralInRange<int>(-2, 2);
  op.process_set = in.ConsumeIntegralInRange<int>(-1, 2);
  std::vector<int64_t> splits(in.ConsumeIntegralInRange<size_t>(0, 3));
  for (int64_t& s : splits) s = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-1, 4) : in.ConsumeIntegral<int64_t>();
  op.nsplits = splits.empty() && in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, 3) : static_cast<int>(splits.size());
  op.splits = splits.empty() ? nullptr : splits.data();
  std::string name = in.ConsumeRandomLengthString(64);
  const bool named = in.ConsumeBool();
  op.name = named ? name.c_str() : nullptr;

  ringfold_tensor_t tensor{};
  tensor.dtype = in.ConsumeIntegralInRange<int>(-1, RINGFOLD_FLOAT8_E5M2 + 1);
  tensor.device = in.ConsumeBool() ? RINGFOLD_CPU_DEVICE : in.ConsumeIntegralInRange<int>(-3, 3);
  tensor.stream = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? reinterpret_cast<void*>(0x1000) : nullptr;
  tensor.ndim = in.ConsumeIntegralInRange<int>(-1, 6);
  std::vector<int64_t> shape(tensor.ndim > 0 ? tensor.ndim : 0);
  for (int64_t& d : shape) d = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 8) : in.ConsumeIntegral<int64_t>();
  tensor.shape = shape.empty() ? (in.ConsumeBool() ? nullptr : reinterpret_cast<const int64_t*>(gInput)) : shape.data();
  if (tensor.ndim <= 0) tensor.shape = tensor.ndim == 0 ? nullptr : tensor.shape;
  bool empty = false;
  const size_t bytes = bytesOf(shape, tensor.dtype, empty);
  const bool fits = empty || bytes > 0 || elementBytes(tensor.dtype) == 0;
  tensor.data = fits ? gInput : nullptr;
  ringfold_tensor_t output = tensor;
  output.data = fits ? gOutput : nullptr;
  const bool ownOutput = op.type == RINGFOLD_ALLREDUCE || op.type == RINGFOLD_BROADCAST || op.type == RINGFOLD_REDUCE;

  int64_t handle = -1;
  const int status = ringfold_enqueue(&op, &tensor, ownOutput ? &output : nullptr, &handle);
  if (status != RINGFOLD_OK) {
    if (!documented(status)) fz::fail(kTarget, "enqueue returned an undocumented status");
    if (ringfold_last_error()[0] == '\0') fz::fail(kTarget, "a refused enqueue without a reason");
    return 0;
  }
  const bool takesTensor = op.type != RINGFOLD_JOIN && op.type != RINGFOLD_BARRIER;
  if (takesTensor && tensor.data == nullptr && !empty && tensor.ndim > 0) {
    fz::fail(kTarget, "a NULL buffer was accepted for a tensor with elements");
  }
  const int done = ringfold_wait(handle, 10.0);
  if (done == RINGFOLD_IN_PROGRESS) fz::fail(kTarget, "an accepted operation did not complete within 10 s");
  if (done != RINGFOLD_OK && ringfold_last_error()[0] == '\0') fz::fail(kTarget, "a failed operation without a reason");
  if (ringfold_release(handle) != RINGFOLD_OK) fz::fail(kTarget, "a completed handle could not be released");
  return 0;
}
