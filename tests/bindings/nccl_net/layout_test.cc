// bindings/nccl_net/net_api.h against NCCL's own plugin headers: every size and offset below was
// printed by a probe compiled with NVIDIA/nccl v2.30.7's plugins/net/example/nccl/net.h
// (offsetof/sizeof on ncclNetProperties_v8..v12_t, ncclNet_v8..v12_t, ncclNetDeviceHandle_v8_t,
// ncclNetCommConfig_v12_t, ncclNetAttr_v12_t, ncclNetVDeviceProps_v9/v12_t) on x86-64 Linux.
// A mismatch means NCCL would read our tables or properties at the wrong place.
#include <gtest/gtest.h>

#include <cstddef>

#include "bindings/nccl_net/net_api.h"

namespace {

using namespace ringfold::ncclnet;

TEST(NcclNetLayout, Properties) {
  EXPECT_EQ(sizeof(PropertiesV8), 64u);
  EXPECT_EQ(offsetof(PropertiesV8, ptrSupport), 24u);
  EXPECT_EQ(offsetof(PropertiesV8, speed), 32u);
  EXPECT_EQ(offsetof(PropertiesV8, latency), 40u);
  EXPECT_EQ(offsetof(PropertiesV8, maxRecvs), 48u);
  EXPECT_EQ(offsetof(PropertiesV8, netDeviceType), 52u);
  EXPECT_EQ(offsetof(PropertiesV8, netDeviceVersion), 56u);

  EXPECT_EQ(sizeof(PropertiesV9), 104u);
  EXPECT_EQ(offsetof(PropertiesV9, forceFlush), 32u);
  EXPECT_EQ(offsetof(PropertiesV9, speed), 36u);
  EXPECT_EQ(offsetof(PropertiesV9, vProps), 64u);
  EXPECT_EQ(offsetof(PropertiesV9, maxP2pBytes), 88u);
  EXPECT_EQ(offsetof(PropertiesV9, maxCollBytes), 96u);
  EXPECT_EQ(sizeof(PropertiesV10), 104u);

  EXPECT_EQ(sizeof(PropertiesV11), 112u);
  EXPECT_EQ(offsetof(PropertiesV11, maxP2pBytes), 88u);
  EXPECT_EQ(offsetof(PropertiesV11, maxMultiRequestSize), 104u);

  EXPECT_EQ(sizeof(PropertiesV12), 128u);
  EXPECT_EQ(offsetof(PropertiesV12, vProps), 64u);
  EXPECT_EQ(offsetof(PropertiesV12, maxP2pBytes), 104u);
  EXPECT_EQ(offsetof(PropertiesV12, maxCollBytes), 112u);
  EXPECT_EQ(offsetof(PropertiesV12, maxMultiRequestSize), 120u);
  EXPECT_EQ(offsetof(PropertiesV12, railId), 124u);
  EXPECT_EQ(offsetof(PropertiesV12, planeId), 126u);
}

TEST(NcclNetLayout, SmallStructs) {
  EXPECT_EQ(sizeof(DeviceHandle), 32u);
  EXPECT_EQ(sizeof(CommConfig), 4u);
  EXPECT_EQ(sizeof(NetAttr), 44u);
  EXPECT_EQ(sizeof(VirtualDevice<4>), 20u);
  EXPECT_EQ(sizeof(VirtualDevice<8>), 36u);
  EXPECT_EQ(sizeof(Result), 4u);
  EXPECT_EQ(sizeof(DeviceType), 4u);
}

TEST(NcclNetLayout, Tables) {
  EXPECT_EQ(sizeof(NetV8), 152u);
  EXPECT_EQ(offsetof(NetV8, isend), 80u);
  EXPECT_EQ(offsetof(NetV8, test), 104u);
  EXPECT_EQ(offsetof(NetV8, irecvConsumed), 144u);
  EXPECT_EQ(sizeof(NetV9), 160u);
  EXPECT_EQ(offsetof(NetV9, makeVDevice), 152u);
  EXPECT_EQ(sizeof(NetV10), 160u);
  EXPECT_EQ(offsetof(NetV10, makeVDevice), 152u);
  EXPECT_EQ(sizeof(NetV11), 176u);
  EXPECT_EQ(offsetof(NetV11, finalize), 160u);
  EXPECT_EQ(offsetof(NetV11, setNetAttr), 168u);
  EXPECT_EQ(sizeof(NetV12), 176u);
  EXPECT_EQ(offsetof(NetV12, finalize), 160u);
  EXPECT_EQ(offsetof(NetV12, setNetAttr), 168u);
  // The entries in between are all function pointers, in order: the name, then 8 bytes each.
  EXPECT_EQ(offsetof(NetV12, init), 8u);
  EXPECT_EQ(offsetof(NetV12, listen), 32u);
  EXPECT_EQ(offsetof(NetV12, regMr), 56u);
  EXPECT_EQ(offsetof(NetV12, irecv), 88u);
  EXPECT_EQ(offsetof(NetV12, closeListen), 128u);
}

TEST(NcclNetLayout, Constants) {
  EXPECT_EQ(kHandleMaxSize, 128u);
  EXPECT_EQ(kPtrHost, 1);
  EXPECT_EQ(kPtrCuda, 2);
  EXPECT_EQ(kPtrDmaBuf, 4);
  EXPECT_EQ(kMaxNetSizeBytes, 1024ull * 1024 * 1024 * 1024);
  EXPECT_EQ(kRemoteError, 6);
  EXPECT_EQ(kInvalidUsage, 5);
}

}  // namespace
