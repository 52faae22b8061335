// Wire format of the tcp_uring backend and the pooled objects that carry frames.
//
// Vocabulary
//   frame   : a FrameHeader followed by `length` payload bytes, on one socket.
//   message : one isend: `total` bytes with a tag and check, numbered by the sender's per-peer
//             message id (0, 1, 2, ...). Small messages travel whole as one frame; messages of
//             at least RINGFOLD_STRIPE_MIN_BYTES are cut into chunks, each a frame with its
//             `offset`, spread over the peer's sockets.
//   chunk   : the frames of one message; they may arrive on different sockets in any order.
//   ABORT   : a frame whose payload is an error message (kind in `kind`); it poisons the
//             receiving device.
//   WAITING : a frame without payload that a rank sends every peer once one of its waits has
//             lasted half its timeout: `tag` is the rank it waits for, `total` how long it has
//             waited (ms), `offset` how long it had then received nothing from that rank (ms). A
//             peer that then times out on this rank follows these notices to the
//             rank that actually went silent, instead of blaming a healthy rank that is itself
//             stuck behind it. A WAITING frame with `tag` kNoRank (sent when the wait ends), or
//             a frame of any message the sender started after the notice (`msgId` of the notice:
//             the sender's next message id), withdraws it. Frames of earlier messages do not:
//             with several sockets they can arrive after the notice. `seq` numbers a
//             sender's WAITING frames to one peer (1, 2, ...), so one overtaken on another socket
//             by a later one is ignored.
// Byte order is the host's (little-endian clusters only; checked at compile time).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ringfold::transport::tcp_uring {

static_assert(std::endian::native == std::endian::little, "tcp_uring's wire format is little-endian");

constexpr uint16_t kFrameMagic = 0x5246;  // "RF"
constexpr size_t kMaxAbortText = 4000;
constexpr uint64_t kNoRank = ~uint64_t{0};  // WAITING: the wait is over

enum class FrameType : uint8_t { kData = 1, kAbort = 2, kWaiting = 3 };

struct FrameHeader {
  uint16_t magic;
  uint8_t type;     // FrameType
  uint8_t kind;     // ABORT: transport::ErrorKind
  uint32_t seq;      // WAITING: its number among the sender's WAITING frames to this peer
  uint64_t msgId;
  uint64_t tag;
  uint64_t check;
  uint64_t total;   // bytes of the whole message
  uint64_t offset;  // of this chunk within the message
  uint64_t length;  // payload bytes after this header
};
static_assert(sizeof(FrameHeader) == 56);

struct RequestState;

// A frame waiting to be sent or in flight. Lives in a pool with a stable index: a zero-copy
// send's notification names its frame by that index, and the header must stay put until then.
struct OutFrame {
  FrameHeader header{};
  const std::byte* payload = nullptr;
  RequestState* request = nullptr;  // null for ABORT and WAITING frames
  std::string text;                 // ABORT payload
  uint32_t index = 0;
  uint32_t notifs = 0;    // zero-copy notifications still due
  bool sent = false;      // every byte handed to the kernel

  void reset() {
    header = {};
    payload = nullptr;
    request = nullptr;
    text.clear();
    notifs = 0;
    sent = false;
  }
};

// A buffer for a message that arrived before its receive; sizes are powers of two, reused.
struct PooledBuffer {
  std::byte* data = nullptr;
  size_t capacity = 0;
};

// This host's physical memory in bytes.
size_t hostMemoryBytes();

// get(bytes) throws std::bad_alloc when `bytes`, rounded up to a power of two, is more than the
// host's memory, or when no memory is left for it.
class BufferPool {
 public:
  explicit BufferPool(size_t maxCachedBytes) : maxCached_(maxCachedBytes) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  PooledBuffer get(size_t bytes);
  void put(PooledBuffer& buffer);

 private:
  size_t maxCached_;
  size_t cached_ = 0;
  std::vector<std::vector<std::byte*>> free_;  // by log2(capacity)
};

// A message being received: matched to a receive, or buffered (unexpected) until one is posted.
// A receive posted while its message is still arriving takes over: what already sits in the
// buffer (spans) is copied once, and the rest lands in the receive's region directly.
struct Inbound {
  uint64_t msgId = 0, tag = 0, check = 0;
  size_t total = 0, received = 0;
  std::byte* dest = nullptr;         // where payload bytes go now
  PooledBuffer buffer;               // storage while unexpected
  RequestState* request = nullptr;   // the receive it completes, once matched
  std::vector<std::pair<size_t, size_t>> spans;  // {offset, length} written into buffer
  uint32_t index = 0;

  void reset() {
    msgId = tag = check = 0;
    total = received = 0;
    dest = nullptr;
    buffer = {};
    request = nullptr;
    spans.clear();  // keeps its capacity: steady state allocates nothing
  }
};

// Objects with stable addresses and indices, recycled without allocating in steady state.
template <typename T>
class ObjectPool {
 public:
  T* get() {
    if (free_.empty()) {
      all_.push_back(std::make_unique<T>());
      all_.back()->index = static_cast<uint32_t>(all_.size() - 1);
      return all_.back().get();
    }
    T* t = free_.back();
    free_.pop_back();
    return t;
  }
  void put(T* t) {
    t->reset();
    free_.push_back(t);
  }
  T* at(uint32_t index) { return index < all_.size() ? all_[index].get() : nullptr; }

 private:
  std::vector<std::unique_ptr<T>> all_;
  std::vector<T*> free_;
};

}  // namespace ringfold::transport::tcp_uring
