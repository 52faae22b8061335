// Peer: the shm protocol (protocol.h) with one peer rank: the ring this rank reads (inbox, the
// peer writes it) and the ring it writes (outbox, the peer's inbox), the peer's doorbell, the
// socket whose hang-up says the peer's process ended, matching of messages to receives (FIFO per
// tag), the sends queued for the outbox, and the sends waiting for the peer's ack word.
//
// Contract: driven only by its DeviceState's thread. postSend/postRecv take requests that stay
// alive while pending (the device forgets them all when it is poisoned: onPoison). receive() and
// flush() never block. A request completes through DeviceState::finish semantics (done = true).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/liveness/monitor.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"
#include "transport/tcp_uring/socket.h"

namespace ringfold::transport::shm {

class DeviceState;
class Peer;

// The state of one isend/irecv, owned by its ShmRequest; the peer keeps raw pointers to it only
// while it is pending.
struct RequestState {
  bool isSend = false;
  Peer* peer = nullptr;
  std::byte* data = nullptr;
  size_t length = 0;
  uint64_t tag = 0, check = 0;
  size_t offset = 0;     // send: bytes pushed into the ring; receive: bytes received
  bool started = false;  // send: its first slot is in the ring
  bool posted = false;
  bool done = false;
  // A lazy receive (Connection::irecvLazy): its message waits in the inbox, at its head, until
  // `sink` is set (ShmRequest::deliver), which then takes the bytes from the ring; until then
  // the peer stops reading that inbox, unless told to unpark (then the bytes go to `data`).
  bool lazy = false;
  Sink* sink = nullptr;
  size_t sunk = 0;  // bytes handed to the sink
};

class Peer {
 public:
  using Clock = std::chrono::steady_clock;

  Peer(DeviceState& device, int rank);
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  // The pair is joined: `inbox` (this rank's, the peer writes it), `outbox` (the peer's),
  // the peer's doorbell, the socket, the peer's pid, and whether large sends to the peer go by
  // cross-memory attach (the peer said it can read this process).
  void attach(Segment inbox, Segment outbox, int peerDoorbell, tcp_uring::Socket socket, pid_t pid, bool cmaToPeer,
              std::string cmaWhyNot);
  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }
  int socket() const { return socket_.fd(); }
  bool cmaToPeer() const { return cmaToPeer_; }
  const std::string& cmaWhyNot() const { return cmaWhyNot_; }

  void postSend(RequestState& r);
  void postRecv(RequestState& r);
  // Handles every slot published in the inbox, up to the start of a message that a lazy receive
  // without a sink waits for (it stays parked there); returns how many.
  unsigned receive();
  // A parked message is read into its receive's memory instead: true if one was parked.
  bool unpark();
  // Pushes queued control slots and sends into the outbox as space allows; returns how many.
  unsigned flush();
  // Reads unmatched requests to send that have waited `minAge` into bounce buffers.
  void bounceUnexpected(Clock::duration minAge);

  void queueNotice(const liveness::Notice& notice);
  void queueAbort(ErrorKind kind, const std::string& text);
  bool abortPending() const;

  // Sleeping (ring.h): before this rank sleeps, after, and whether it must not.
  void prepareSleep();
  void endSleep();
  bool ready() const;  // a slot to read, or space for a queued send

  // The socket hung up: the peer's process ended (or it shut ringfold down).
  void hangUp();
  bool gone() const { return gone_; }
  // The device was poisoned: forget every request.
  void onPoison();

 private:
  struct Unexpected {
    uint64_t tag = 0, check = 0, length = 0;
    std::unique_ptr<std::byte[]> data;  // `capacity` bytes, from spares_ (not zeroed)
    size_t capacity = 0;
    size_t filled = 0;
    bool rts = false;       // a request to send not yet read (data empty)
    uint64_t address = 0;   // rts: where the bytes are in the sender
    uint64_t id = 0;        // rts: the send's id
    Clock::time_point arrived{};
  };
  struct Control {
    SlotHeader header;
    std::string payload;
  };

  // Buffers for unexpected messages, kept for reuse (a fresh one costs page faults and zeroing
  // per message): the smallest spare that fits, else a new one. False (after failing the device,
  // the size named) when this host cannot hold `u.length` bytes.
  bool allocate(Unexpected& u);
  void recycle(Unexpected& u);
  void handle(SlotHeader* s);
  // A message's first slot came before the last slot of the one before: fails the device.
  void interleaved(const SlotHeader& slot);
  // Completes the sends whose ack word the peer has set; returns how many.
  unsigned collectAcks();
  // The first posted receive with `tag` (removed from the list), or null.
  RequestState* match(uint64_t tag);
  // True when the slot at the inbox's head starts a message whose receive is lazy, without a sink.
  bool parks(const SlotHeader* s) const;
  // False (after failing the device) when the receive's length or check differs from the message's.
  bool agree(const RequestState& r, uint64_t length, uint64_t check);
  // Reads a request to send into `dst`, then acknowledges it; false after failing the device.
  bool readRts(std::byte* dst, uint64_t length, uint64_t address, uint64_t id);
  void deliver(RequestState& r, Unexpected& u);
  void finish(RequestState& r);
  void queueControl(const SlotHeader& h, std::string payload = {});
  // After publishing (slots, freed space, an ack word): rings the peer's doorbell if `sleeping`
  // (its flag on that ring) says it sleeps, clearing the flag.
  void wakeIfSleeping(std::atomic<uint32_t>& sleeping);
  bool hasPendingWork() const;
  void poisonGone();
  // "the process of rank R (pid P) exited" (or "is still running<ifRunning>", "exited or
  // crashed"), from /proc, waiting up to 500 ms for a killed process to finish exiting.
  std::string processText(const char* ifRunning) const;
  size_t space();
  void publish();

  DeviceState& device_;
  const int rank_;
  Segment inboxSegment_, outboxSegment_;
  Ring in_, out_;
  int peerDoorbell_ = -1;
  tcp_uring::Socket socket_;
  pid_t pid_ = 0;
  bool cmaToPeer_ = false;
  std::string cmaWhyNot_;
  bool gone_ = false;

  // Receiving.
  uint64_t head_ = 0;                  // next inbox slot to read
  std::deque<RequestState*> posted_;   // receives not yet matched, in posting order
  std::deque<std::unique_ptr<Unexpected>> unexpected_;  // messages not yet matched, in arrival order
  std::vector<std::pair<size_t, std::unique_ptr<std::byte[]>>> spares_;  // {capacity, buffer}
  RequestState* inRequest_ = nullptr;  // the eager message arriving: into this receive,
  Unexpected* inBuffer_ = nullptr;     // or into this buffer
  bool inMessage_ = false;
  bool parked_ = false;                // receive() stopped at a lazy receive's message

  // Sending.
  uint64_t tail_ = 0;         // next outbox slot to fill
  uint64_t cachedHead_ = 0;   // the peer's head as last read
  uint64_t sent_ = 0;         // data messages pushed (their numbers)
  uint64_t nextId_ = 1;
  std::deque<Control> control_;
  std::deque<RequestState*> sendQueue_;
  std::vector<std::pair<uint64_t, RequestState*>> awaitingAck_;
};

}  // namespace ringfold::transport::shm
