// Fuzz target: the shm backend's ring protocol (transport/shm/protocol.h, peer.cc): a hostile or
// broken peer of a shared-memory pair, read by a real shm Device through a real mapping.
//
// Each input sets up a fresh pair: rank 0 is a real shm Device (connectAll through a HashStore,
// its authenticated Unix mesh socket, memfd rings and doorbells); rank 1 is this harness, which
// joins the same mesh and sends its hello and descriptors by hand, so the input may bend the
// hello (magic, rank, announced geometry) and the header of the ring it offers. Then it writes
// the input's slots into rank 0's inbox ring through its own mapping of that memfd, publishing
// each with the ring's release store of the tail, and drives rank 0 with progress(); it may also
// rewrite the inbox's geometry, make the tail jump, and corrupt the head of its own ring. Rank 0
// has receives posted for the input's tags and lengths, before or after the slots arrive.
// Finally rank 1 closes its socket and unmaps, as a process that ends (or, unless the input
// says so, first lets every pending receive time out).
//
// Checks: no crash or memory error; start-up that rejects a hello does so with an Error that
// says why; every receive that completes holds exactly the message a correct receiver would give
// it (a model of protocol.h: FIFO per tag, an eager message's slots in order, a message that was
// cut off by another never complete, lengths equal), and every receive ends, completed or failed
// with an error that names its cause, within 5 s (of the peer closing, or of a 5 ms wait) --
// never a hang; no allocation past the host's memory (fuzz.sh's -malloc_limit_mb) for a size the
// peer announced.
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_support.h"
#include "rendezvous/hash_store.h"
#include "transport/connection.h"
#include "transport/memory_region.h"
#include "transport/shm/device.h"
#include "transport/shm/protocol.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"
#include "transport/tcp_uring/mesh.h"

namespace shm = ringfold::transport::shm;
namespace tu = ringfold::transport::tcp_uring;
namespace fz = ringfold::fuzz;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kTarget = "shm_slots_fuzz";
// Rank 0's rings (set in the environment below): small, so messages span slots and rings fill.
constexpr uint32_t kSlots = 4;
constexpr uint32_t kSlotBytes = 128;
constexpr size_t kPayload = kSlotBytes - sizeof(shm::SlotHeader);

struct Receive {
  uint64_t tag = 0, length = 0, check = 0;
  bool before = true;  // posted before the slots arrive
  std::vector<std::byte> buffer;
  std::unique_ptr<ringfold::transport::PlainMemoryRegion> region;
  std::unique_ptr<ringfold::transport::Request> request;
  bool done = false, failed = false;
};

// What a correct receiver makes of the slots rank 1 published (protocol.h): the messages in the
// order they started.
struct Message {
  uint64_t tag = 0, length = 0, check = 0;
  bool rts = false;
  bool complete = false;
  std::string data;
};
struct Model {
  std::vector<Message> messages;
  Message* open = nullptr;  // an eager message still taking slots
  bool stopped = false;     // a slot no correct receiver goes on after
  bool unmodelled = false;  // the peer re-published slots: what it sent is no longer known here
  void slot(const shm::SlotHeader& h, const std::byte* payload) {
    if (stopped) return;
    const size_t bytes = std::min<size_t>(h.bytes, kPayload);
    switch (h.type) {
      case shm::kEager:
      case shm::kRts: {
        open = nullptr;  // a message cut off by another never completes
        Message m;
        m.tag = h.tag;
        m.length = h.length;
        m.check = h.check;
        m.rts = h.type == shm::kRts;
        messages.push_back(std::move(m));
        if (h.type == shm::kRts) return;
        open = &messages.back();
        [[fallthrough]];
      }
      case shm::kMore: {
        if (open == nullptr) {
          stopped = true;
          return;
        }
        const size_t take = std::min<uint64_t>(bytes, open->length - open->data.size());
        open->data.append(reinterpret_cast<const char*>(payload), take);
        if (open->data.size() == open->length) {
          open->complete = true;
          open = nullptr;
        }
        return;
      }
      case shm::kMismatch:
      case shm::kNotice:
      case shm::kAbort:
        return;
      default:
        stopped = true;
    }
  }
};

// Rank 1: the end of the pair this harness plays.
struct FakePeer {
  tu::Socket socket;
  shm::Segment inbox;   // rank 1's own ring (rank 0 writes it)
  shm::Segment outbox;  // rank 0's inbox (rank 1 writes it)
  int doorbell = -1;
  int peerDoorbell = -1;
  uint64_t tail = 0;
  ~FakePeer() {
    if (doorbell >= 0) ::close(doorbell);
    if (peerDoorbell >= 0) ::close(peerDoorbell);
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("RINGFOLD_LOG_LEVEL", "fatal", 1);
  ::setenv("RINGFOLD_SHM_SLOTS", "4", 1);
  ::setenv("RINGFOLD_SHM_SLOT_BYTES", "128", 1);
  ::setenv("RINGFOLD_SHM_CMA", "off", 1);
  ::setenv("RINGFOLD_TIMEOUT", "5", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::atomic<uint64_t> serial{0};
  fz::Input in{data, size};
  const uint8_t flags = in.u8();

  // The hello rank 1 sends, and the header of the ring it offers: bent where the input says.
  shm::Hello hello;
  hello.rank = 1;
  hello.slots = kSlots;
  hello.slotBytes = kSlotBytes;
  uint32_t ringMagic = shm::kRingMagic, ringSlots = kSlots, ringSlotBytes = kSlotBytes;
  if (flags & 1) {
    hello.magic ^= in.u8();
    hello.rank = static_cast<int8_t>(in.u8());
    hello.slots = static_cast<uint32_t>(in.le(4));
    hello.slotBytes = static_cast<uint32_t>(in.le(4));
    ringMagic ^= in.u8();
    ringSlots = static_cast<uint32_t>(in.le(4));
    ringSlotBytes = static_cast<uint32_t>(in.le(4));
  }

  // The receives rank 0 posts.
  std::vector<Receive> receives(in.u8() % 5);
  for (Receive& r : receives) {
    const uint8_t b = in.u8();
    r.tag = b & 3;
    r.before = (b & 4) == 0;
    r.check = (b >> 3) & 3;
    r.length = in.length() & 0xffff;  // the receive's own memory stays small
    r.buffer.assign(r.length, std::byte{0xEE});
    r.region = std::make_unique<ringfold::transport::PlainMemoryRegion>(r.buffer.data(), r.buffer.size());
  }

  // Start-up: rank 0 in a thread, rank 1 here.
  ringfold::rendezvous::HashStore store;
  const std::string prefix = "fuzz" + std::to_string(serial++);
  auto device = shm::createDevice();
  std::vector<std::unique_ptr<ringfold::transport::Connection>> connections;
  std::exception_ptr connectError;
  std::thread rank0([&] {
    try {
      connections = device->connectAll(store, prefix, 0, 2, std::chrono::milliseconds(5000));
    } catch (...) {
      connectError = std::current_exception();
    }
  });
  FakePeer peer;
  bool joined = false;
  try {
    tu::MeshOptions mesh;
    mesh.prefix = prefix;
    mesh.rank = 1;
    mesh.size = 2;
    mesh.family = tu::Family::kUnix;
    mesh.timeout = std::chrono::milliseconds(5000);
    auto sockets = tu::connectMesh(store, mesh);
    peer.socket = std::move(sockets[0][0]);
    peer.inbox = shm::Segment::create("fuzz-shm-inbox", shm::ringBytes(kSlots, kSlotBytes));
    shm::Ring::format(peer.inbox.data(), kSlots, kSlotBytes);
    auto* h = static_cast<shm::RingHeader*>(peer.inbox.data());
    h->magic = ringMagic;
    h->slots = ringSlots;
    h->slotBytes = ringSlotBytes;
    peer.doorbell = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    shm::sendFds(peer.socket.fd(), &hello, sizeof hello, {peer.inbox.fd(), peer.doorbell}, "fuzz hello");
    shm::Hello theirs;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    auto fds = shm::recvFds(peer.socket.fd(), &theirs, sizeof theirs, 2, deadline, "fuzz: rank 0's hello");
    if (fds.size() != 2) fz::fail(kTarget, "rank 0 sent a hello without its two descriptors");
    peer.outbox = shm::Segment::adopt(fds[0], shm::ringBytes(theirs.slots, theirs.slotBytes), "rank 0's ring");
    peer.peerDoorbell = fds[1];
    const char answer = 0;
    shm::sendFds(peer.socket.fd(), &answer, 1, {}, "fuzz answer");
    char theirAnswer = 0;
    shm::recvFds(peer.socket.fd(), &theirAnswer, 1, 0, deadline, "fuzz: rank 0's answer");
    joined = true;
  } catch (const ringfold::Error&) {
    // Rank 0 refused this rank's hello and closed: its connectAll says why (checked below).
  }
  if (!joined) peer.socket = tu::Socket();  // rank 0 may wait for a hello that never comes
  rank0.join();
  if (connectError != nullptr) {
    if (fz::errorText(connectError).empty()) fz::fail(kTarget, "start-up failed without a reason");
    return 0;
  }
  if (!joined) fz::fail(kTarget, "rank 0 joined a pair that rank 1 never finished joining");
  ringfold::transport::Connection& to1 = *connections[1];

  auto post = [&](Receive& r) {
    try {
      r.request = to1.irecv(*r.region, 0, r.length, r.tag, r.check);
    } catch (const ringfold::Error& e) {  // the device failed already: it says why
      if (e.what()[0] == '\0') fz::fail(kTarget, "a receive was refused without a reason");
      r.failed = true;
    }
  };
  auto drive = [&] {
    try {
      device->progress();
    } catch (const ringfold::Error&) {
    }
  };
  for (Receive& r : receives) {
    if (r.before) post(r);
  }

  // The slots, and what else a peer with the mapping can do to it.
  auto* ring = static_cast<shm::RingHeader*>(peer.outbox.data());
  auto* own = static_cast<shm::RingHeader*>(peer.inbox.data());
  shm::Ring view(peer.outbox.data(), kSlots, kSlotBytes);  // rank 0's geometry (its settings)
  Model model;
  for (int ops = 0; !in.empty() && ops < 256; ++ops) {
    const uint8_t op = in.u8();
    own->head.store(own->tail.load(std::memory_order_acquire), std::memory_order_release);  // rank 1 reads all
    switch (op >> 5) {
      case 5:  // rewrite the inbox's geometry under rank 0
        ring->magic ^= in.u8();
        ring->slots = static_cast<uint32_t>(in.le(4));
        ring->slotBytes = static_cast<uint32_t>(in.le(4));
        continue;
      case 6:  // the tail jumps (forward, or back; or anywhere)
        peer.tail = (op & 1) ? in.le(8) : peer.tail + static_cast<int16_t>(in.le(2));
        ring->tail.store(peer.tail, std::memory_order_release);
        model.unmodelled = true;  // slots published again, with whatever they held: no model of them
        drive();
        continue;
      case 7:  // corrupt the head of rank 1's own ring, which rank 0 writes
        own->head.store(in.le(8), std::memory_order_release);
        drive();
        continue;
      default:
        break;
    }
    shm::SlotHeader h;
    h.type = static_cast<uint8_t>(op & 7);
    if (op & 8) h.type = in.u8();
    h.status = in.u8();
    h.bytes = static_cast<uint32_t>(in.u8() & 0x7f);
    if (op & 16) h.bytes = static_cast<uint32_t>(in.le(4));
    h.tag = in.u8() & 3;
    h.check = in.u8() & 3;
    h.length = in.length();
    h.number = in.le(1);
    h.id = in.le(1);
    h.extra = in.le(8);
    if (h.type == shm::kRts) h.address = in.le(8);
    std::byte payload[kPayload] = {};
    const size_t n = std::min<size_t>(h.bytes, kPayload);
    for (size_t i = 0; i < n; ++i) payload[i] = std::byte{in.u8()};
    // Space in rank 0's inbox: rank 0 frees slots as it reads them.
    for (int tries = 0; peer.tail - ring->head.load(std::memory_order_acquire) >= kSlots && tries < 3; ++tries) drive();
    if (peer.tail - ring->head.load(std::memory_order_acquire) >= kSlots) break;  // rank 0 stopped reading
    shm::SlotHeader* s = view.slot(peer.tail);
    std::memcpy(shm::Ring::payload(s), payload, n);
    *s = h;
    ring->tail.store(++peer.tail, std::memory_order_release);
    model.slot(h, payload);
    drive();
  }
  for (Receive& r : receives) {
    if (!r.before) post(r);
  }
  for (int i = 0; i < 8; ++i) drive();

  // Every receive must end. Where the input says so, rank 1 ends as a process does: its socket
  // closes and its mappings go (the receiver then gives a process that is still running up to
  // 500 ms to exit, so these inputs are slow); else each pending receive waits 5 ms and must
  // time out with an error naming rank 1. Either way within a bound, never a hang.
  auto settle = [&](Receive& r, bool wait) {
    try {
      if (wait) {
        r.request->wait(std::chrono::milliseconds(5));
        r.done = true;
      } else {
        r.done = r.request->test();
      }
    } catch (const ringfold::Error& e) {
      if (e.what()[0] == '\0') fz::fail(kTarget, "a receive failed without a reason");
      r.failed = true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: unexpected exception: %s\n", kTarget, e.what());
      __builtin_trap();
    }
  };
  auto close = [&] {
    peer.socket = tu::Socket();
    peer.outbox = shm::Segment();
    peer.inbox = shm::Segment();
  };
  if (flags & 2) close();
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    bool pending = false;
    for (Receive& r : receives) {
      if (r.done || r.failed) continue;
      settle(r, (flags & 2) == 0);
      pending = pending || !(r.done || r.failed);
    }
    if (!pending) break;
    if (Clock::now() > deadline) fz::fail(kTarget, "a receive neither completed nor failed within 5 s");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  close();

  // Every completed receive holds its message: the k-th receive of a tag, the k-th message of it.
  std::map<uint64_t, size_t> seen;
  std::map<uint64_t, std::vector<const Message*>> byTag;
  for (const Message& m : model.messages) byTag[m.tag].push_back(&m);
  std::vector<Receive*> posted;
  for (Receive& r : receives) {
    if (r.before) posted.push_back(&r);
  }
  for (Receive& r : receives) {
    if (!r.before) posted.push_back(&r);
  }
  for (Receive* r : posted) {
    const size_t k = seen[r->tag]++;
    if (!r->done) continue;
    const auto& list = byTag[r->tag];
    if (model.unmodelled) continue;
    if (k >= list.size()) fz::fail(kTarget, "a receive completed with a message the peer never started");
    const Message& m = *list[k];
    if (m.length != r->length || m.check != r->check) fz::fail(kTarget, "a receive completed with a message of another length or check");
    if (m.rts) continue;  // read from the peer's memory (here: whatever the address held)
    if (!m.complete) fz::fail(kTarget, "a receive completed with a message the peer never finished");
    if (r->length > 0 && std::memcmp(r->buffer.data(), m.data.data(), r->length) != 0) {
      fz::fail(kTarget, "a receive holds bytes other than its message's");
    }
  }
  for (Receive& r : receives) r.request.reset();
  connections.clear();
  device.reset();
  return 0;
}
