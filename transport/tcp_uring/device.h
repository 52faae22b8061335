// tcp_uring backend: ranks are processes; each pair is joined by RINGFOLD_SOCKETS_PER_PEER stream
// sockets driven by one io_uring per device: TCP ("tcp_uring"), or one Unix-domain socket per
// peer between ranks on one host ("unix_uring"); the creator chooses (Options::family).
//
// Files of this backend
//   device.{h,cc}      the Device: Options, createDevice, connectAll/registerMemory/abort
//   connection.{h,cc}  TcpConnection (isend/irecv) and TcpRequest (test/wait)
//   memory_region.h    plain memory: TCP needs no registration
//   device_state.{h,cc} DeviceState, the state the three share: progress, wait, poison, abort
//   peer_link.{h,cc}, peer_link_receive.cc  the protocol with one peer over its sockets
//   frame.{h,cc}       the wire format, pooled frames and buffers
//   uring_loop.{h,cc}  the io_uring (setup, submit, drain, wait)
//   mesh.{h,cc}        the start-up mesh (listen, publish, hello/ack with tokens)
//   pair.{h,cc}        PairLink: one link over sockets the caller connected (NCCL net plugin)
//   interfaces.{h,cc}  which IPv4 address a TCP device listens on
//   socket.{h,cc}      an owned descriptor and the data sockets' options
//   kernel_view.{h,cc} what the kernel says about a peer (process state, TCP_INFO)
//
// Contract (TcpDevice, device.cc): connectAll connects once, the peers ConnectSpec selects;
// name() is "tcp_uring" or "unix_uring" by family; abortReason() is the error the device was
// poisoned with; progress() and the wait hook drive DeviceState (device_state.h).
#pragma once

#include <memory>
#include <string>

#include "transport/device.h"
#include "transport/tcp_uring/socket.h"

namespace ringfold::transport::tcp_uring {

// What a tcp_uring device is told by its creator (transport::createDevice passes DeviceConfig).
struct Options {
  Family family = Family::kTcp;
  // TCP: the store's host; the device listens on the interface that reaches it (interfaces.h).
  std::string storeAddress;
  // TCP: listen here instead (an IPv4 address); empty: chosen from storeAddress.
  std::string listenAddress;
};

// Throws Error explaining why if io_uring cannot be used here (kernel too old, disabled by
// sysctl kernel.io_uring_disabled, or blocked by seccomp).
std::unique_ptr<Device> createDevice(const Options& options = {});

}  // namespace ringfold::transport::tcp_uring
