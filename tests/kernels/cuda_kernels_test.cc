// gpu label: the CUDA kernels against the CPU reducer and the host functors, bit for bit, on
// random data (every bit pattern: NaN, Inf, subnormals) at misaligned offsets and awkward
// counts; compression with the device-computed loss scale; the batched copy; CudaReducer.
// Skips without a CUDA device.
#include <cstring>
#include <random>
#include <vector>

#include "gpu_support.h"
#include "kernels/cuda_kernels.h"
#include "common/error.h"
#include "kernels/reduce_ops.cuh"
#include "reduce/cpu_reducer.h"

namespace ringfold::cuda {
namespace {

using testgpu::DeviceBuffer;

std::vector<unsigned char> randomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override { RF_SKIP_WITHOUT_GPU(); }
  std::mt19937_64 rng_{42};
};

TEST_F(CudaKernels, ReduceMatchesCpuReducerAtMisalignedOffsets) {
  auto cpu = makeCpuReducer();
  const DataType types[] = {DataType::kInt8,   DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
                            DataType::kInt64,  DataType::kUint64,  DataType::kFloat16, DataType::kBfloat16,
                            DataType::kFloat32, DataType::kFloat64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
  struct Offsets { size_t d, a, b; };
  const Offsets offsets[] = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 2}, {5, 0, 5}};
  for (DataType dt : types) {
    const size_t es = dataTypeSize(dt);
    for (size_t count : {size_t{1}, size_t{17}, size_t{4099}, (size_t{1} << 20) + 3}) {
      const size_t bytes = (count + 8) * es;
      DeviceBuffer dd(bytes), da(bytes), db(bytes);
      const auto a = randomBytes(bytes, rng_), b = randomBytes(bytes, rng_);
      RF_CUDA_OK(cudaMemcpy(da.as(), a.data(), bytes, cudaMemcpyHostToDevice));
      RF_CUDA_OK(cudaMemcpy(db.as(), b.data(), bytes, cudaMemcpyHostToDevice));
      for (ReduceOp op : ops) {
        for (const Offsets& o : offsets) {
          for (auto [pre, post] : {std::pair{1.0, 1.0}, std::pair{0.5, 3.0}}) {
            std::vector<unsigned char> scaledB(b), want(bytes), got(bytes);
            const unsigned char* bp = b.data() + o.b * es;
            if (pre != 1.0) {
              cpu->scale(scaledB.data() + o.b * es, bp, count, dt, pre);
              bp = scaledB.data() + o.b * es;
            }
            cpu->reduce(want.data(), a.data() + o.a * es, bp, count, dt, op, post);
            RF_CUDA_OK(reduce(dd.as(o.d * es), da.as(o.a * es), db.as(o.b * es), count, dt, op, pre, post, nullptr));
            RF_CUDA_OK(cudaMemcpy(got.data(), dd.as(o.d * es), count * es, cudaMemcpyDeviceToHost));
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), count * es))
                << dataTypeName(dt) << " " << reduceOpName(op) << " count " << count << " offsets " << o.d << ","
                << o.a << "," << o.b << " pre " << pre << " post " << post;
          }
        }
      }
    }
  }
}

TEST_F(CudaKernels, ReduceInPlaceAndScale) {
  auto cpu = makeCpuReducer();
  const size_t count = 100003;
  const auto a = randomBytes(count * 4, rng_), b = randomBytes(count * 4, rng_);
  DeviceBuffer da(count * 4), db(count * 4);
  RF_CUDA_OK(cudaMemcpy(da.as(), a.data(), count * 4, cudaMemcpyHostToDevice));
  RF_CUDA_OK(cudaMemcpy(db.as(), b.data(), count * 4, cudaMemcpyHostToDevice));
  std::vector<unsigned char> want(count * 4), got(count * 4);
  cpu->reduce(want.data(), a.data(), b.data(), count, DataType::kFloat32, ReduceOp::kSum, 0.25);
  RF_CUDA_OK(reduce(da.as(), da.as(), db.as(), count, DataType::kFloat32, ReduceOp::kSum, 1.0, 0.25, nullptr));
  RF_CUDA_OK(cudaMemcpy(got.data(), da.as(), count * 4, cudaMemcpyDeviceToHost));
  ASSERT_EQ(0, std::memcmp(want.data(), got.data(), count * 4));
  for (DataType dt : {DataType::kInt64, DataType::kFloat16, DataType::kBfloat16}) {
    const size_t n = count * 4 / dataTypeSize(dt) - 1;
    cpu->scale(want.data(), b.data() + dataTypeSize(dt), n, dt, -1.5);
    RF_CUDA_OK(scale(da.as(), db.as(dataTypeSize(dt)), n, dt, -1.5, nullptr));
    RF_CUDA_OK(cudaMemcpy(got.data(), da.as(), n * dataTypeSize(dt), cudaMemcpyDeviceToHost));
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), n * dataTypeSize(dt))) << dataTypeName(dt);
  }
  EXPECT_EQ(cudaErrorInvalidValue, reduce(da.as(), da.as(), db.as(), 1, DataType::kBool, ReduceOp::kSum, 1, 1, nullptr));
}

TEST_F(CudaKernels, CompressionRoundTripWithDeviceLossScale) {
  const size_t count = (size_t{1} << 20) + 5;
  std::vector<float> x(count);
  std::normal_distribution<float> g(0.0f, 1e6f);  // overflows float16 without a scale
  for (auto& v : x) v = g(rng_);
  for (HalfFormat fmt : {HalfFormat::kFloat16, HalfFormat::kBfloat16}) {
    for (size_t off : {size_t{0}, size_t{1}, size_t{3}}) {
      DeviceBuffer din((count + 4) * 4), dh((count + 4) * 2), dout((count + 4) * 4), dscale(4);
      RF_CUDA_OK(cudaMemcpy(din.as<float>(off * 4), x.data(), count * 4, cudaMemcpyHostToDevice));
      size_t temp = 0;
      RF_CUDA_OK(compressAutoScale(nullptr, temp, dh.as(), din.as<float>(off * 4), count, fmt, 2.0f,
                                   dscale.as<float>(), nullptr));
      DeviceBuffer dtemp(temp);
      RF_CUDA_OK(compressAutoScale(dtemp.as(), temp, dh.as(off * 2), din.as<float>(off * 4), count, fmt, 2.0f,
                                   dscale.as<float>(), nullptr));
      RF_CUDA_OK(decompress(dout.as<float>(), dh.as(off * 2), count, fmt, dscale.as<float>(), nullptr));
      float s = 0;
      std::vector<uint16_t> h(count);
      std::vector<float> back(count);
      RF_CUDA_OK(cudaMemcpy(&s, dscale.as(), 4, cudaMemcpyDeviceToHost));
      RF_CUDA_OK(cudaMemcpy(h.data(), dh.as(off * 2), count * 2, cudaMemcpyDeviceToHost));
      RF_CUDA_OK(cudaMemcpy(back.data(), dout.as(), count * 4, cudaMemcpyDeviceToHost));
      float maxAbs = 0;
      for (float v : x) maxAbs = std::max(maxAbs, std::fabs(v));
      const float maxFinite = fmt == HalfFormat::kFloat16 ? 65504.0f : 3.38953139e38f;
      ASSERT_EQ(powerOfTwoScale(maxAbs, maxFinite / 2.0f), s);
      for (size_t i = 0; i < count; ++i) {
        const uint16_t want = fmt == HalfFormat::kFloat16 ? compressElement<Float16>(x[i], s).bits
                                                           : compressElement<Bfloat16>(x[i], s).bits;
        ASSERT_EQ(want, h[i]) << i;
        const float wantBack = fmt == HalfFormat::kFloat16 ? decompressElement(Float16{h[i]}, 1.0f / s)
                                                           : decompressElement(Bfloat16{h[i]}, 1.0f / s);
        ASSERT_EQ(wantBack, back[i]) << i;
        ASSERT_TRUE(std::isfinite(back[i])) << i;
      }
    }
  }
}

TEST_F(CudaKernels, BatchedCopyMovesEveryTensor) {
  const int n = 300;
  std::vector<CopyDesc> descs(n);
  std::vector<size_t> srcOff(n), dstOff(n), sizes(n);
  std::uniform_int_distribution<size_t> size(0, 70000), skew(0, 15);
  size_t srcBytes = 0, dstBytes = 0;
  for (int i = 0; i < n; ++i) {
    sizes[i] = size(rng_);
    srcOff[i] = srcBytes + skew(rng_);
    dstOff[i] = dstBytes + skew(rng_);
    srcBytes = srcOff[i] + sizes[i];
    dstBytes = dstOff[i] + sizes[i];
  }
  DeviceBuffer src(srcBytes), dst(dstBytes), ddescs(n * sizeof(CopyDesc));
  const auto data = randomBytes(srcBytes, rng_);
  RF_CUDA_OK(cudaMemcpy(src.as(), data.data(), srcBytes, cudaMemcpyHostToDevice));
  RF_CUDA_OK(cudaMemset(dst.as(), 0, dstBytes));
  for (int i = 0; i < n; ++i) descs[i] = CopyDesc{src.as(srcOff[i]), dst.as(dstOff[i]), sizes[i]};
  RF_CUDA_OK(uploadCopyDescs(ddescs.as<CopyDesc>(), descs.data(), n, nullptr));
  RF_CUDA_OK(batchedCopy(ddescs.as<CopyDesc>(), n, nullptr));
  std::vector<unsigned char> out(dstBytes);
  RF_CUDA_OK(cudaMemcpy(out.data(), dst.as(), dstBytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(0, std::memcmp(out.data() + dstOff[i], data.data() + srcOff[i], sizes[i])) << "tensor " << i;
  }
}

TEST_F(CudaKernels, CudaReducerImplementsReducerOnItsStream) {
  cudaStream_t stream;
  RF_CUDA_OK(cudaStreamCreate(&stream));
  CudaReducer red(0, stream);
  Reducer& r = red;
  auto cpu = makeCpuReducer();
  const size_t count = 77777;
  const auto a = randomBytes(count * 2, rng_), b = randomBytes(count * 2, rng_);
  DeviceBuffer da(count * 2), db(count * 2);
  RF_CUDA_OK(cudaMemcpy(da.as(), a.data(), count * 2, cudaMemcpyHostToDevice));
  RF_CUDA_OK(cudaMemcpy(db.as(), b.data(), count * 2, cudaMemcpyHostToDevice));
  r.reduce(da.as(), da.as(), db.as(), count, DataType::kBfloat16, ReduceOp::kMax, 0.5);
  std::vector<unsigned char> want(count * 2), got(count * 2);
  cpu->reduce(want.data(), a.data(), b.data(), count, DataType::kBfloat16, ReduceOp::kMax, 0.5);
  RF_CUDA_OK(cudaStreamSynchronize(stream));
  RF_CUDA_OK(cudaMemcpy(got.data(), da.as(), count * 2, cudaMemcpyDeviceToHost));
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), count * 2));
  EXPECT_THROW(r.reduce(da.as(), da.as(1), db.as(), 10, DataType::kInt8, ReduceOp::kSum), InvalidArgument);
  RF_CUDA_OK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace ringfold::cuda
