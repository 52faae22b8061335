// Fuzz target: the rdma backend's control slots and immediates (transport/rdma/protocol.h,
// wire.h, peer_receive.cc), and its start-up exchange: a hostile or broken peer, read by a real
// rdma Device over the fake fabric (transport/rdma/fabric_fake.h: ranks of one process, writes
// that land when their target polls, remote keys and ranges checked as a NIC checks them).
//
// Each input sets up a fresh pair: rank 0 is a real rdma Device (connectAll through a HashStore,
// fabric "fake"); rank 1 is this harness, driving a fake Fabric of its own by hand. It publishes
// its address blob (ring geometry, address and key, fabric address: bent where the input says),
// inserts rank 0, and sends its hello slot (its text bent too). Then it writes the input's slots
// into rank 0's ring with write-with-imm as a sender would (kData, kRts, kCts, kNotice, kAbort,
// kHello, kNone, unknown types; any message number, tag, check, length, stamp, rendezvous id),
// spending and receiving credits, or at an index of its choosing, and sends raw immediates
// (kSlot, kCredits, kDone, unknown). It answers rank 0's clear-to-send as a correct sender does
// (chunks of a known pattern, each with its kDone) unless told not to. Rank 0 has receives posted
// for the input's tags and lengths, before or after. Finally rank 1 vanishes as a killed process.
//
// Checks: no crash or memory error; a start-up that fails does so with an Error that says why;
// every receive that completes holds what a correct receiver gives it (a model of protocol.h:
// messages resolved in number order, FIFO per tag, lengths and checks equal, an eager payload as
// sent, a rendezvous as written); every receive ends, completed or failed with an error naming
// its cause, within a bounded wait after the peer vanished -- never a hang; no allocation past
// the host's memory (fuzz.sh's -malloc_limit_mb) for a size or a ring the peer announced.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_support.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/secret.h"
#include "transport/connection.h"
#include "transport/memory_region.h"
#include "transport/rdma/device.h"
#include "transport/rdma/fabric_fake.h"
#include "transport/rdma/wire.h"

namespace rdma = ringfold::transport::rdma;
namespace wire = ringfold::transport::rdma::wire;
namespace fz = ringfold::fuzz;
using Clock = std::chrono::steady_clock;
using wire::SlotType;

namespace {

constexpr const char* kTarget = "rdma_slots_fuzz";
// Rank 0's ring (set in the environment below) and rank 1's own.
constexpr uint32_t kSlots = 4;
constexpr uint32_t kSlotBytes = 128;
constexpr size_t kHeader = sizeof(wire::SlotHeader);
constexpr size_t kPayload = kSlotBytes - kHeader;
constexpr int kMaxOps = 128;
constexpr size_t kPatternBytes = 1 << 16;

std::byte* pages(size_t bytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, (bytes + 4095) & ~size_t{4095}) != 0) std::abort();
  std::memset(p, 0, bytes);
  return static_cast<std::byte*>(p);
}

struct Receive {
  uint64_t tag = 0, length = 0, check = 0;
  bool before = true;
  std::vector<std::byte> buffer;
  std::unique_ptr<ringfold::transport::MemoryRegion> region;
  std::unique_ptr<ringfold::transport::Request> request;
  bool done = false, failed = false;
};

// What a correct receiver makes of the slots that reached rank 0 (protocol.h).
struct Message {
  uint64_t tag = 0, length = 0, check = 0;
  bool rts = false;
  std::string data;
};
struct Model {
  std::map<uint64_t, Message> arrived;  // by message number
  std::vector<Message> resolved;        // in number order
  bool stopped = false;                 // a slot no correct receiver goes on after
  void slot(const wire::SlotHeader& h, const std::byte* payload, uint64_t position) {
    if (stopped) return;
    if (h.payloadBytes > kPayload) {
      stopped = true;
      return;
    }
    const auto type = static_cast<SlotType>(h.type);
    if (type != SlotType::kData && type != SlotType::kRts) {
      if (type == SlotType::kNone || h.type > static_cast<uint16_t>(SlotType::kAbort)) stopped = true;
      return;
    }
    if ((type == SlotType::kRts && h.length <= kPayload) ||
        (type == SlotType::kData && (h.length != h.payloadBytes || (h.address != 0 && h.address != position + 1)))) {
      stopped = true;
      return;
    }
    if (h.message < resolved.size() || arrived.count(h.message) != 0) {
      stopped = true;
      return;
    }
    Message m;
    m.tag = h.tag;
    m.length = h.length;
    m.check = h.check;
    m.rts = type == SlotType::kRts;
    if (!m.rts) m.data.assign(reinterpret_cast<const char*>(payload), h.length);
    arrived.emplace(h.message, std::move(m));
    while (!arrived.empty() && arrived.begin()->first == resolved.size()) {
      resolved.push_back(std::move(arrived.begin()->second));
      arrived.erase(arrived.begin());
    }
  }
};

// Rank 1, by hand.
struct FakePeer {
  std::unique_ptr<rdma::Fabric> fabric;
  std::byte* ring = nullptr;     // rank 1's ring: rank 0 writes it
  std::byte* staging = nullptr;  // every slot rank 1 writes, each at its own place
  std::byte* pattern = nullptr;  // a rendezvous' data
  rdma::Registration ringReg, stagingReg, patternReg;
  rdma::RemoteAddress remote;    // rank 0's ring for rank 1
  uint32_t remoteSlots = 0, remoteSlotBytes = 0;
  uint32_t credits = 0;
  uint64_t position = 0;  // ring positions of rank 0's ring written
  size_t staged = 0;
  bool answerCts = true;
  bool gone = false;
  std::map<uint32_t, uint64_t> rts;  // rendezvous ids rank 1 announced, and their lengths
  uint64_t context = 1;

  ~FakePeer() {
    if (fabric) fabric->close();
    std::free(ring);
    std::free(staging);
    std::free(pattern);
  }
  void post(const void* local, size_t length, const rdma::Registration& reg, rdma::RemoteAddress to, uint32_t imm,
            int lane = 0) {
    if (gone) return;
    for (int tries = 0; tries < 100; ++tries) {
      if (fabric->postWriteImm(0, lane, local, length, reg, to, imm, context++) != -EAGAIN) return;
      poll();
    }
  }
  // A slot at rank 0's ring index `index` (the next position's when it spends a credit).
  void writeSlot(const wire::SlotHeader& h, const std::byte* payload, size_t n, uint32_t index) {
    std::byte* st = staging + staged;
    staged += kHeader + kPayload;
    std::memcpy(st, &h, kHeader);
    std::memcpy(st + kHeader, payload, n);
    post(st, kHeader + n, stagingReg, {remote.address + uint64_t{index} * remoteSlotBytes, remote.rkey},
         wire::imm(wire::ImmType::kSlot, index));
  }
  // Lands rank 0's writes here; takes credits, answers clear-to-send, returns credits.
  void poll() {
    if (gone) return;
    rdma::Completion c[16];
    for (int round = 0; round < 4; ++round) {
      const int n = fabric->poll(c, 16);
      for (int i = 0; i < n; ++i) {
        if (c[i].type != rdma::Completion::Type::kImmediate) continue;
        const uint32_t value = wire::immValue(c[i].imm);
        if (wire::immType(c[i].imm) == wire::ImmType::kCredits) credits += value;
        if (wire::immType(c[i].imm) != wire::ImmType::kSlot || value >= kSlots) continue;
        wire::SlotHeader h;
        std::memcpy(&h, ring + size_t{value} * kSlotBytes, kHeader);
        if (h.type == static_cast<uint16_t>(SlotType::kCts) && h.status == 0 && answerCts) answer(h);
        post(staging, 0, stagingReg, remote, wire::imm(wire::ImmType::kCredits, 1));
      }
      if (n < 16) break;
    }
  }
  void answer(const wire::SlotHeader& h) {
    auto it = rts.find(h.rts);
    if (it == rts.end() || it->second != h.length || h.length > kPatternBytes) return;
    const uint64_t chunk = wire::cutChunkBytes(h.check);
    const uint32_t lanes = wire::cutLanes(h.check);
    if (chunk == 0 || lanes == 0 || lanes > static_cast<uint32_t>(fabric->lanes())) return;
    for (uint64_t off = 0; off < h.length || off == 0; off += chunk) {
      post(pattern + off, std::min<uint64_t>(chunk, h.length - off), patternReg, {h.address + off, h.rkey},
           wire::imm(wire::ImmType::kDone, h.rendezvous), static_cast<int>((off / chunk) % lanes));
      if (h.length == 0) break;
    }
    rts.erase(it);
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("RINGFOLD_LOG_LEVEL", "fatal", 1);
  ::setenv("RINGFOLD_RDMA_FABRIC", "fake", 1);
  ::setenv("RINGFOLD_RDMA_SLOTS", "4", 1);
  ::setenv("RINGFOLD_RDMA_SLOT_BYTES", "128", 1);
  ::setenv("RINGFOLD_RDMA_CHUNK_BYTES", "4096", 1);
  ::setenv("RINGFOLD_TIMEOUT", "5", 1);
  rdma::fake::Faults faults;
  faults.goneDelayMs = 1;  // a vanished peer's writes fail at once
  rdma::fake::setFaults(faults);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::atomic<uint64_t> serial{0};
  fz::Input in{data, size};
  const uint8_t flags = in.u8();

  FakePeer peer;
  peer.fabric = rdma::fake::open(1, 2);
  peer.ring = pages(size_t{kSlots} * kSlotBytes);
  peer.ringReg = peer.fabric->registerMemory(peer.ring, size_t{kSlots} * kSlotBytes, rdma::MemoryKind::kHost);
  peer.staging = pages((kMaxOps + 2) * kSlotBytes);
  peer.stagingReg = peer.fabric->registerMemory(peer.staging, (kMaxOps + 2) * kSlotBytes, rdma::MemoryKind::kHost);
  peer.pattern = pages(kPatternBytes);
  for (size_t i = 0; i < kPatternBytes; ++i) peer.pattern[i] = std::byte(static_cast<uint8_t>(i * 131 + (i >> 8)));
  peer.patternReg = peer.fabric->registerMemory(peer.pattern, kPatternBytes, rdma::MemoryKind::kHost);

  // Rank 1's address blob (device_state.cc's format), bent where the input says.
  uint32_t slots = kSlots, slotBytes = kSlotBytes;
  uint64_t address = peer.ringReg.remoteBase, rkey = peer.ringReg.rkey;
  std::string fabricAddress = ringfold::rendezvous::toHex(
      reinterpret_cast<const uint8_t*>(peer.fabric->localAddress(0).data()), peer.fabric->localAddress(0).size());
  std::string head = "ringfold-rdma 1 fake 1 1 2";
  if (flags & 1) {
    slots = static_cast<uint32_t>(in.le(4));
    slotBytes = static_cast<uint32_t>(in.le(4));
    address += static_cast<int8_t>(in.u8());
    rkey ^= in.u8();
  }
  if (flags & 2) {  // any text in place of the header line or the fabric address
    std::string text;
    for (size_t n = in.u8() % 48; n > 0; --n) text += static_cast<char>(in.u8());
    (flags & 4 ? head : fabricAddress) = text;
  }
  std::ostringstream blob;
  blob << head << '\n' << 0 << ' ' << slots << ' ' << slotBytes << ' ' << address << ' ' << rkey << ' '
       << fabricAddress << '\n';
  std::string hello = "ringfold-rdma 1 -";
  if (flags & 8) {
    hello.clear();
    for (size_t n = in.u8() % 40; n > 0; --n) hello += static_cast<char>(in.u8());
  }

  std::vector<Receive> receives(in.u8() % 5);
  for (Receive& r : receives) {
    const uint8_t b = in.u8();
    r.tag = b & 3;
    r.before = (b & 4) == 0;
    r.check = (b >> 3) & 3;
    r.length = in.length() & 0xffff;
    r.buffer.assign(r.length, std::byte{0xEE});
  }

  // Start-up: rank 0 in a thread, rank 1 here.
  ringfold::rendezvous::HashStore store;
  const std::string prefix = "fuzz" + std::to_string(serial++);
  auto device = rdma::createDevice();
  std::vector<std::unique_ptr<ringfold::transport::Connection>> connections;
  std::exception_ptr connectError;
  std::atomic<bool> connected{false};
  std::thread rank0([&] {
    try {
      connections = device->connectAll(store, prefix, 0, 2, std::chrono::milliseconds(2000));
    } catch (...) {
      connectError = std::current_exception();
    }
    connected = true;
  });
  const std::string text = blob.str();
  store.set(prefix + "/addr/1", std::vector<uint8_t>(text.begin(), text.end()));
  bool joined = false;
  try {
    const auto bytes = store.get(prefix + "/addr/0", std::chrono::milliseconds(5000));
    std::istringstream theirs(std::string(bytes.begin(), bytes.end()));
    std::string line;
    std::getline(theirs, line);
    int q = -1;
    std::string hex;
    theirs >> q >> peer.remoteSlots >> peer.remoteSlotBytes >> peer.remote.address >> peer.remote.rkey >> hex;
    if (q != 1 || peer.remoteSlots != kSlots || peer.remoteSlotBytes != kSlotBytes) {
      fz::fail(kTarget, "rank 0 published a ring other than its settings say");
    }
    peer.fabric->insertPeer(0, ringfold::rendezvous::fromHex(hex));
    peer.credits = peer.remoteSlots;
    peer.fabric->postImmReceives(0, 1 << 20);
    store.set(prefix + "/ready/1", std::vector<uint8_t>{'1'});
    // Rank 0 is ready once it read and accepted this blob; it may refuse it instead.
    while (!store.check({prefix + "/ready/0"})) {
      if (connected) throw ringfold::Error("rank 0 gave up");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    wire::SlotHeader h;
    h.type = static_cast<uint16_t>(SlotType::kHello);
    h.payloadBytes = static_cast<uint32_t>(std::min(hello.size(), kPayload));
    peer.writeSlot(h, reinterpret_cast<const std::byte*>(hello.data()), h.payloadBytes, 0);
    --peer.credits;
    ++peer.position;
    joined = true;
  } catch (const ringfold::Error&) {
    // Rank 0 gave up before publishing (it read this blob and refused it): its error is checked.
  }
  const auto startDeadline = Clock::now() + std::chrono::seconds(10);
  while (!connected) {
    if (Clock::now() > startDeadline) fz::fail(kTarget, "rank 0's connectAll outlived its own timeout");
    peer.poll();
    std::this_thread::yield();
  }
  rank0.join();
  if (connectError != nullptr) {
    if (fz::errorText(connectError).empty()) fz::fail(kTarget, "start-up failed without a reason");
    return 0;
  }
  if (!joined) fz::fail(kTarget, "rank 0 connected to a rank that never said hello");
  ringfold::transport::Connection& to1 = *connections[1];
  for (Receive& r : receives) r.region = device->registerMemory(r.buffer.data(), r.buffer.size());

  auto post = [&](Receive& r) {
    try {
      r.request = to1.irecv(*r.region, 0, r.length, r.tag, r.check);
    } catch (const ringfold::Error& e) {  // the device failed already: it says why
      if (e.what()[0] == '\0') fz::fail(kTarget, "a receive was refused without a reason");
      r.failed = true;
    }
  };
  auto drive = [&] {
    for (int i = 0; i < 2; ++i) {
      try {
        device->progress();
      } catch (const ringfold::Error&) {
      }
      peer.poll();
    }
  };
  for (Receive& r : receives) {
    if (r.before) post(r);
  }
  drive();

  Model model;
  bool rawDone = false;  // kDone immediates the harness did not send as a correct sender
  uint64_t nextMessage = 0;
  for (int ops = 0; !in.empty() && ops < kMaxOps && !peer.gone; ++ops) {
    const uint8_t op = in.u8();
    const int kind = op >> 5;
    if (kind == 5) {  // a raw immediate, with a zero-length write to the ring's base
      const uint32_t imm = static_cast<uint32_t>(in.le(4));
      if (wire::immType(imm) == wire::ImmType::kDone) rawDone = true;
      peer.post(peer.staging, 0, peer.stagingReg, peer.remote, imm);
      drive();
      continue;
    }
    if (kind == 6) {
      peer.answerCts = !peer.answerCts;
      continue;
    }
    if (kind == 7) {  // rank 1 vanishes early
      rdma::fake::disappear(*peer.fabric);
      peer.gone = true;
      break;
    }
    static constexpr SlotType kTypes[] = {SlotType::kData,   SlotType::kRts,   SlotType::kCts,  SlotType::kNotice,
                                          SlotType::kAbort, SlotType::kHello, SlotType::kNone, SlotType::kData};
    wire::SlotHeader h;
    h.type = static_cast<uint16_t>(kTypes[op & 7]);
    if ((op & 7) == 7) h.type = static_cast<uint16_t>(in.le(2));
    h.status = in.u8();
    const bool numbered = h.type == static_cast<uint16_t>(SlotType::kData) || h.type == static_cast<uint16_t>(SlotType::kRts);
    h.message = (op & 8) || !numbered ? in.le(1) : nextMessage++;
    h.tag = in.u8() & 3;
    h.check = in.u8() & 3;
    h.length = in.length();
    if (h.type == static_cast<uint16_t>(SlotType::kData)) {
      h.payloadBytes = static_cast<uint32_t>(std::min<uint64_t>(h.length, kPayload));
    } else {
      h.payloadBytes = in.u8() & 0x3f;
    }
    if (op & 16) h.payloadBytes = static_cast<uint32_t>(in.le(4));
    const uint8_t stamp = in.u8();
    h.address = (stamp & 3) == 0 ? 0 : (stamp & 3) == 1 ? peer.position + 1 : (stamp & 3) == 2 ? peer.position : in.le(8);
    h.rkey = in.le(1);
    h.rts = static_cast<uint32_t>(in.le(1));
    h.rendezvous = static_cast<uint32_t>(in.le(1));
    if (h.type == static_cast<uint16_t>(SlotType::kCts)) h.check = in.le(8);  // the cut
    std::byte payload[kPayload] = {};
    const size_t n = std::min<size_t>(h.payloadBytes, kPayload);
    for (size_t i = 0; i < n; ++i) payload[i] = std::byte{in.u8()};
    if (kind == 4) {  // at an index of the input's choosing, spending no credit
      peer.writeSlot(h, payload, n, static_cast<uint32_t>(in.le(4)) & wire::kImmValueMask);
      drive();
      model.stopped = true;  // the ring's order is broken: no model from here
      continue;
    }
    for (int tries = 0; peer.credits == 0 && tries < 3; ++tries) drive();
    if (peer.credits == 0) break;  // rank 0 stopped reading
    if (h.type == static_cast<uint16_t>(SlotType::kRts)) peer.rts[h.rts] = h.length;
    peer.writeSlot(h, payload, n, static_cast<uint32_t>(peer.position % peer.remoteSlots));
    model.slot(h, payload, peer.position);
    --peer.credits;
    ++peer.position;
    drive();
  }
  for (Receive& r : receives) {
    if (!r.before) post(r);
  }
  for (int i = 0; i < 4; ++i) drive();

  // Rank 1 vanishes; every receive must end, each wait bounded.
  if (!peer.gone) rdma::fake::disappear(*peer.fabric);
  peer.gone = true;
  const auto settle = Clock::now() + std::chrono::milliseconds(5);
  auto testAll = [&] {
    bool pending = false;
    for (Receive& r : receives) {
      if (r.done || r.failed) continue;
      try {
        r.done = r.request->test();
      } catch (const ringfold::Error& e) {
        if (e.what()[0] == '\0') fz::fail(kTarget, "a receive failed without a reason");
        r.failed = true;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: unexpected exception: %s\n", kTarget, e.what());
        __builtin_trap();
      }
      pending = pending || !(r.done || r.failed);
    }
    return pending;
  };
  while (testAll() && Clock::now() < settle) std::this_thread::sleep_for(std::chrono::microseconds(200));
  for (Receive& r : receives) {
    if (r.done || r.failed) continue;
    const auto started = Clock::now();
    try {
      r.request->wait(std::chrono::milliseconds(5));
      r.done = true;
    } catch (const ringfold::Error& e) {
      if (e.what()[0] == '\0') fz::fail(kTarget, "a receive failed without a reason");
      r.failed = true;
    }
    if (Clock::now() - started > std::chrono::seconds(3)) fz::fail(kTarget, "a wait of 5 ms took over 3 s");
  }

  // Every completed receive holds its message: the k-th receive of a tag, the k-th resolved
  // message of it.
  std::map<uint64_t, std::vector<const Message*>> byTag;
  for (const Message& m : model.resolved) byTag[m.tag].push_back(&m);
  std::map<uint64_t, size_t> seen;
  std::vector<Receive*> posted;
  for (Receive& r : receives) {
    if (r.before) posted.push_back(&r);
  }
  for (Receive& r : receives) {
    if (!r.before) posted.push_back(&r);
  }
  for (Receive* r : posted) {
    const size_t k = seen[r->tag]++;
    if (!r->done || model.stopped) continue;
    const auto& list = byTag[r->tag];
    if (k >= list.size()) fz::fail(kTarget, "a receive completed with a message the peer never sent");
    const Message& m = *list[k];
    if (m.length != r->length || m.check != r->check) fz::fail(kTarget, "a receive completed with a message of another length or check");
    const void* expected = m.rts ? static_cast<const void*>(peer.pattern) : m.data.data();
    if (m.rts && rawDone) continue;  // the peer claimed chunks it never wrote
    if (r->length > 0 && std::memcmp(r->buffer.data(), expected, r->length) != 0) {
      fz::fail(kTarget, "a receive holds bytes other than its message's");
    }
  }
  for (Receive& r : receives) r.request.reset();
  for (Receive& r : receives) r.region.reset();
  connections.clear();
  device.reset();
  return 0;
}
