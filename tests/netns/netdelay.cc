// rf_netdelay: a packet-impairment emulator for the emulated cluster (scripts/netns_lib.sh
// netns_impair / netns_delay, bench/compare/netns_cluster.sh), for kernels built without netem:
// delay, jitter, loss, duplication and reordering.
//
// Contract. Bound to NFQUEUE queue Q of the network namespace it runs in, it takes every packet
// that a rule sends to Q (`iptables -t mangle -A POSTROUTING ! -o lo -m mark ! --mark M -j
// NFQUEUE --queue-num Q --queue-bypass`, M the --dup-mark) and, for each, in this order:
//   --loss F       drops it (NF_DROP) with probability F; a sender sees nothing, as on a wire;
//   --duplicate F  with probability F sends it twice: the original, and right after it a copy;
//   --reorder F    with probability F holds it back --reorder-us more (default: the delay, at
//                  least 1 ms), so that packets sent after it overtake it;
//   otherwise      holds it --delay-us plus a uniform 0..--jitter-us, then accepts it.
// Jitter keeps order: a packet never leaves before one queued ahead of it that was not held
// back (a link's queue, not netem's independent draws), so under load the delays bunch towards
// the top of the range and only --reorder reorders. The decisions come from a PRNG seeded with
// --seed (default: from the clock; the --stats line prints it), four draws per packet in
// arrival order, so one seed and one packet sequence give the same decisions.
// Nothing else is dropped except past --limit held packets (each such drop is counted and said
// on stderr); the kernel's queue is twice as long, and fail-open, so a stalled emulator lets
// packets through unimpaired instead of blocking the host.
//
// Mechanism. NFQUEUE over raw netlink (NETLINK_NETFILTER): the kernel keeps the packet and
// sends 16 bytes of it plus metadata (copy range 16), so the cost is per packet, not per byte.
// With delay and jitter only, GSO packets are queued whole (NFQA_CFG_F_GSO: one decision per
// up to 64 KiB); with --loss, --duplicate or --reorder the kernel segments them to the MTU
// (checksums completed) before queueing, so that each decision is about one wire packet, as on
// a real link, at a per-MTU cost (about 0.6 Gbit/s for one TCP flow on a 2-vCPU VM, against
// 3-7 Gbit/s delayed only). A verdict cannot duplicate (NF_REPEAT re-runs the hook on the same
// packet; it makes no copy), so with --duplicate the kernel copies every packet whole (copy
// range 64 KiB), and the copy goes out right after the original's verdict, unimpaired: a packet
// the namespace routes through a raw IPv4 socket (IPPROTO_RAW, header included) carrying
// SO_MARK --dup-mark, which the rule excludes; a bridged packet (br_netfilter) as a frame on
// the bridge port it left by, through a packet socket, to the MAC the bridge learned behind
// that port (its forwarding database; one host per port, as in the emulated clusters). A copy
// that cannot go counts as "dup_failed".
// Releases: a timerfd on CLOCK_MONOTONIC (absolute, armed for the next deadline) and epoll
// wait without spinning; in-order packets leave with batch verdicts ("accept every id up to
// N") unless a held-back packet older than N is still queued, then with one verdict each.
// Releasing runs the rest of the transmit path (qdisc, veth) in this process's system calls.
//
// Scheduling. The wait is a kernel timer, but the release runs when this process gets a CPU:
// on busy CPUs --rt-priority (SCHED_FIFO; netns_impair uses 10) keeps the p99 near the median.
//
// Lifetime. Exits cleanly on SIGTERM, SIGINT or SIGHUP (accepting what it holds at once; copies
// not yet sent are not sent), when --parent-pid exits (pidfd), or when /run/netns/--netns no
// longer names the namespace it runs in (polled every 200 ms). Closing its socket destroys the
// queue; the rule's bypass flag then passes packets unimpaired. With --stats it prints one line at
// exit (and on SIGUSR1): packets and bytes released, the achieved delay (release time minus arrival
// time: median, p99, max), drops past --limit, packets lost (--loss), duplicated (copies sent) and
// failed copies, held back (--reorder) and reordered (held-back packets that a later packet did
// overtake), the seed, and packets the kernel let through unimpaired ("bypassed", seen as gaps in
// packet ids).
// <arpa/inet.h> (glibc's netinet/in.h) before the uapi headers, which then skip linux/in.h.
#include <arpa/inet.h>
#include <getopt.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/ethernet.h>
#include <netinet/ip.h>
#include <netpacket/packet.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"

namespace {

using ringfold::InvalidArgument;

constexpr uint32_t kCopyBytes = 16;              // payload bytes copied per packet (length only)
constexpr uint32_t kCopyWhole = 0xffff;          // --duplicate: whole packets (the kernel clamps)
constexpr int64_t kWatchPeriodNs = 200'000'000;  // namespace / parent check (pidfd fallback)
constexpr size_t kHistogramUs = 100'000;         // delay excess histogram: 1 us bins up to 100 ms
constexpr int64_t kMinReorderUs = 1000;          // --reorder-us default: the delay, at least this

int64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Packet ids count modulo 2^32: true when id a comes after id b.
bool idAfter(uint32_t a, uint32_t b) { return int32_t(a - b) > 0; }

struct Options {
  int64_t delayUs = 0;
  int64_t jitterUs = 0;
  double loss = 0, duplicate = 0, reorder = 0;
  int64_t reorderUs = -1;  // -1: max(delayUs, kMinReorderUs)
  uint64_t seed = 0;
  bool seedGiven = false;
  uint32_t dupMark = 0x52460001;
  uint16_t queue = 0;
  uint32_t limit = 16384;
  pid_t parentPid = 0;
  int rtPriority = 0;
  std::string netns;
  std::string pidFile;
  bool daemon = false;
  bool stats = false;
};

constexpr const char* kUsage =
    "usage: rf_netdelay [--delay-us US] [--jitter-us J] [--loss F] [--duplicate F]\n"
    "                   [--reorder F] [--reorder-us R] [--seed S] [--dup-mark M] [--queue Q]\n"
    "                   [--limit N] [--parent-pid PID] [--netns NAME] [--rt-priority P]\n"
    "                   [--daemon] [--pid-file FILE] [--stats]\n"
    "  Impairs every packet of NFQUEUE queue Q (default 0) of this namespace: drops a fraction\n"
    "  F (0..1) of them (--loss), sends a fraction twice (--duplicate: the copy goes out through\n"
    "  a raw socket marked M, default 0x52460001, which the queue's rule must exclude), holds a\n"
    "  fraction back R more microseconds (--reorder; R default: US, at least 1000) so later ones\n"
    "  overtake them, and holds the rest US (default 0) plus a uniform 0..J microseconds, in\n"
    "  order (jitter does not reorder). --seed: the PRNG's seed (default: from the clock).\n"
    "  --limit: packets held at most (default 16384; more are dropped and counted).\n"
    "  --parent-pid: exit when PID exits. --netns: exit when /run/netns/NAME stops naming this\n"
    "  namespace. --rt-priority: run SCHED_FIFO at P (1-99; default 0: not), so that busy CPUs\n"
    "  do not delay releases. --daemon: detach once the queue is bound (the foreground process\n"
    "  exits 0 then, or 1 on a setup error). --stats: one statistics line on stderr at exit,\n"
    "  and on SIGUSR1.\n";

// base 0: 0x... (and 0...: octal) too.
int64_t parseInt(const char* flag, const char* text, int64_t lo, int64_t hi, int base = 10) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, base);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    RF_THROW(InvalidArgument, flag, " wants an integer in [", lo, ", ", hi, "], got '", text, "'");
  }
  return v;
}

double parseFraction(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v >= 0.0 && v <= 1.0)) {
    RF_THROW(InvalidArgument, flag, " wants a fraction in [0, 1], got '", text, "'");
  }
  return v;
}

uint64_t parseSeed(const char* text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    RF_THROW(InvalidArgument, "--seed wants an unsigned 64-bit integer, got '", text, "'");
  }
  return v;
}

Options parseOptions(int argc, char** argv) {
  static const option kLong[] = {{"delay-us", required_argument, nullptr, 'd'},
                                 {"jitter-us", required_argument, nullptr, 'j'},
                                 {"loss", required_argument, nullptr, 'L'},
                                 {"duplicate", required_argument, nullptr, 'u'},
                                 {"reorder", required_argument, nullptr, 'o'},
                                 {"reorder-us", required_argument, nullptr, 'O'},
                                 {"seed", required_argument, nullptr, 'S'},
                                 {"dup-mark", required_argument, nullptr, 'm'},
                                 {"queue", required_argument, nullptr, 'q'},
                                 {"limit", required_argument, nullptr, 'l'},
                                 {"parent-pid", required_argument, nullptr, 'p'},
                                 {"netns", required_argument, nullptr, 'n'},
                                 {"pid-file", required_argument, nullptr, 'f'},
                                 {"rt-priority", required_argument, nullptr, 'r'},
                                 {"daemon", no_argument, nullptr, 'D'},
                                 {"stats", no_argument, nullptr, 's'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  Options o;
  int c;
  while ((c = getopt_long(argc, argv, "", kLong, nullptr)) != -1) {
    switch (c) {
      case 'd': o.delayUs = parseInt("--delay-us", optarg, 0, 10'000'000); break;
      case 'j': o.jitterUs = parseInt("--jitter-us", optarg, 0, 10'000'000); break;
      case 'L': o.loss = parseFraction("--loss", optarg); break;
      case 'u': o.duplicate = parseFraction("--duplicate", optarg); break;
      case 'o': o.reorder = parseFraction("--reorder", optarg); break;
      case 'O': o.reorderUs = parseInt("--reorder-us", optarg, 1, 10'000'000); break;
      case 'S':
        o.seed = parseSeed(optarg);
        o.seedGiven = true;
        break;
      case 'm': o.dupMark = uint32_t(parseInt("--dup-mark", optarg, 1, 0xffffffffLL, 0)); break;
      case 'q': o.queue = uint16_t(parseInt("--queue", optarg, 0, 65535)); break;
      case 'l': o.limit = uint32_t(parseInt("--limit", optarg, 1, 1 << 24)); break;
      case 'p': o.parentPid = pid_t(parseInt("--parent-pid", optarg, 1, 1 << 30)); break;
      case 'n': o.netns = optarg; break;
      case 'r': o.rtPriority = int(parseInt("--rt-priority", optarg, 0, 99)); break;
      case 'f': o.pidFile = optarg; break;
      case 'D': o.daemon = true; break;
      case 's': o.stats = true; break;
      case 'h': std::fputs(kUsage, stdout); std::exit(0);
      default: std::fputs(kUsage, stderr); std::exit(2);
    }
  }
  if (optind != argc) {
    std::fputs(kUsage, stderr);
    std::exit(2);
  }
  if (o.netns.find('/') != std::string::npos) RF_THROW(InvalidArgument, "--netns takes a name");
  if (o.reorderUs < 0) o.reorderUs = std::max(o.delayUs, kMinReorderUs);
  if (!o.seedGiven) o.seed = uint64_t(nowNs()) ^ (uint64_t(getpid()) << 32);
  return o;
}

// The decisions' randomness: splitmix64, small and reproducible from one 64-bit seed.
class Prng {
 public:
  explicit Prng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  uint64_t state_;
};

// What a queue notification says about one packet.
struct Packet {
  uint32_t id = 0;
  uint32_t length = 0;      // the packet's length
  std::string_view bytes;   // what the kernel copied: 16 bytes, or all with wholeCopies
  uint32_t bridgePort = 0;  // a bridged packet: ifindex of the bridge port it leaves by; else 0
};

// One netlink request or verdict: nlmsghdr + nfgenmsg + attributes, built in place.
class NlMessage {
 public:
  NlMessage(uint8_t msg, uint16_t flags, uint16_t queue) {
    auto* h = reinterpret_cast<nlmsghdr*>(buf_);
    h->nlmsg_type = uint16_t((NFNL_SUBSYS_QUEUE << 8) | msg);
    h->nlmsg_flags = uint16_t(NLM_F_REQUEST | flags);
    auto* g = reinterpret_cast<nfgenmsg*>(buf_ + NLMSG_HDRLEN);
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htons(queue);
    len_ = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg));
  }
  template <typename T>
  NlMessage& attr(uint16_t type, const T& value) {
    auto* a = reinterpret_cast<nlattr*>(buf_ + len_);
    a->nla_type = type;
    a->nla_len = uint16_t(NLA_HDRLEN + sizeof(T));
    std::memcpy(buf_ + len_ + NLA_HDRLEN, &value, sizeof(T));
    len_ += NLA_ALIGN(a->nla_len);
    return *this;
  }
  const char* data() {
    reinterpret_cast<nlmsghdr*>(buf_)->nlmsg_len = uint32_t(len_);
    return buf_;
  }
  size_t size() const { return len_; }

 private:
  alignas(nlmsghdr) char buf_[128] = {};
  size_t len_;
};

// The netlink end of one NFQUEUE queue in this namespace, bound and configured at construction.
// perWirePacket: GSO packets are segmented to the MTU (checksums completed) before they are
// queued, so that each notification is one wire packet; else they come whole (NFQA_CFG_F_GSO).
// wholeCopies (needs perWirePacket): the kernel copies each packet whole, not its first 16 bytes.
class NfQueue {
 public:
  NfQueue(uint16_t queue, uint32_t kernelMaxlen, bool perWirePacket, bool wholeCopies)
      : queue_(queue) {
    fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    RF_CHECK_ERRNO(fd_, "netlink socket (NETLINK_NETFILTER)");
    int rcvbuf = 16 << 20;  // room for ~20k notifications before the kernel fails open
    if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0) {
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    }
    sockaddr_nl local{};
    local.nl_family = AF_NETLINK;
    RF_CHECK_ERRNO(bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local), "netlink bind");
    timeval tv{2, 0};
    RF_CHECK_ERRNO(setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), "SO_RCVTIMEO");

    nfqnl_msg_config_cmd cmd{};
    cmd.command = NFQNL_CFG_CMD_BIND;
    nfqnl_msg_config_params params{};
    params.copy_range = htonl(wholeCopies ? kCopyWhole : kCopyBytes);
    params.copy_mode = NFQNL_COPY_PACKET;
    const uint32_t mask = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
    const uint32_t flags = perWirePacket ? NFQA_CFG_F_FAIL_OPEN : mask;
    NlMessage m(NFQNL_MSG_CONFIG, NLM_F_ACK, queue);
    m.attr(NFQA_CFG_CMD, cmd).attr(NFQA_CFG_PARAMS, params);
    m.attr(NFQA_CFG_QUEUE_MAXLEN, htonl(kernelMaxlen));
    m.attr(NFQA_CFG_MASK, htonl(mask)).attr(NFQA_CFG_FLAGS, htonl(flags));
    sendToKernel(m);
    awaitAck();
  }
  ~NfQueue() { close(fd_); }
  NfQueue(const NfQueue&) = delete;
  NfQueue& operator=(const NfQueue&) = delete;

  int fd() const { return fd_; }

  // Reads what is queued on the socket now (at most `rounds` reads) and calls
  // onPacket(const Packet&) for each packet notification. Returns false once the socket is empty.
  template <typename F>
  bool drain(int rounds, F&& onPacket) {
    for (int r = 0; r < rounds; ++r) {
      ssize_t n = recv(fd_, rx_.data(), rx_.size(), MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
        if (errno == EINTR) continue;
        if (errno == ENOBUFS) {  // the kernel failed open on notifications it could not deliver
          ++overruns_;
          continue;
        }
        RF_CHECK_ERRNO(n, "recv on the queue socket");
      }
      int left = int(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(rx_.data()); NLMSG_OK(h, left);
           h = NLMSG_NEXT(h, left)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
          auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
          if (e->error != 0) noteVerdictError(-e->error);
        } else if (h->nlmsg_type == ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET)) {
          parsePacket(h, onPacket);
        }
      }
    }
    return true;
  }

  // NF_ACCEPT (or another verdict) for every queued packet whose id is up to `id`, in order.
  void verdictUpTo(uint32_t id, uint32_t verdict) { sendVerdict(NFQNL_MSG_VERDICT_BATCH, id, verdict); }
  void verdictOne(uint32_t id, uint32_t verdict) { sendVerdict(NFQNL_MSG_VERDICT, id, verdict); }

  uint64_t overruns() const { return overruns_; }
  uint64_t verdictErrors() const { return verdictErrors_; }

 private:
  template <typename F>
  static void parsePacket(nlmsghdr* h, F&& onPacket) {
    const size_t off = NLMSG_ALIGN(sizeof(nfgenmsg));
    auto* a = reinterpret_cast<nlattr*>(static_cast<char*>(NLMSG_DATA(h)) + off);
    int left = int(h->nlmsg_len) - int(NLMSG_HDRLEN + off);
    Packet p;
    uint32_t capLen = 0;
    bool haveId = false;
    while (left >= int(NLA_HDRLEN) && a->nla_len >= NLA_HDRLEN && int(a->nla_len) <= left) {
      const char* data = reinterpret_cast<const char*>(a) + NLA_HDRLEN;
      switch (a->nla_type & NLA_TYPE_MASK) {
        case NFQA_PACKET_HDR: {
          nfqnl_msg_packet_hdr ph;
          std::memcpy(&ph, data, sizeof ph);
          p.id = ntohl(ph.packet_id);
          haveId = true;
          break;
        }
        case NFQA_CAP_LEN: capLen = ntohl(u32At(data)); break;  // only when truncated
        case NFQA_PAYLOAD: p.bytes = {data, size_t(a->nla_len - NLA_HDRLEN)}; break;
        case NFQA_IFINDEX_PHYSOUTDEV: p.bridgePort = ntohl(u32At(data)); break;
        default: break;
      }
      left -= NLA_ALIGN(a->nla_len);
      a = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(a) + NLA_ALIGN(a->nla_len));
    }
    p.length = capLen != 0 ? capLen : uint32_t(p.bytes.size());
    if (haveId) onPacket(p);
  }
  static uint32_t u32At(const char* data) {
    uint32_t v;
    std::memcpy(&v, data, sizeof v);
    return v;
  }

  void sendVerdict(uint8_t msg, uint32_t id, uint32_t verdict) {
    nfqnl_msg_verdict_hdr v{htonl(verdict), htonl(id)};
    NlMessage m(msg, 0, queue_);
    m.attr(NFQA_VERDICT_HDR, v);
    sendToKernel(m);
  }

  void sendToKernel(NlMessage& m) {
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    for (;;) {
      ssize_t n = sendto(fd_, m.data(), m.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
                         sizeof kernel);
      if (n >= 0) return;  // the kernel's complaints, if any, come back as NLMSG_ERROR
      if (errno == EINTR) continue;
      RF_CHECK_ERRNO(n, "sendto on the queue socket");
    }
  }

  void awaitAck() {
    ssize_t n = recv(fd_, rx_.data(), rx_.size(), 0);
    RF_CHECK_ERRNO(n, "no answer to the queue bind");
    auto* h = reinterpret_cast<nlmsghdr*>(rx_.data());
    RF_ENFORCE(NLMSG_OK(h, int(n)) && h->nlmsg_type == NLMSG_ERROR, "unexpected bind answer");
    int err = -static_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
    if (err == EPERM || err == EBUSY) {
      RF_THROW(ringfold::Error, "binding NFQUEUE queue ", queue_, ": ", std::strerror(err),
               " (another process has this queue in this namespace, or no CAP_NET_ADMIN)");
    }
    if (err != 0) {
      RF_THROW(ringfold::Error, "binding NFQUEUE queue ", queue_, ": ", std::strerror(err),
               " (kernel without CONFIG_NETFILTER_NETLINK_QUEUE?)");
    }
  }

  void noteVerdictError(int err) {
    if (verdictErrors_++ == 0) {
      std::fprintf(stderr, "rf_netdelay: queue %u: a verdict failed: %s\n", queue_,
                   std::strerror(err));
    }
  }

  int fd_ = -1;
  uint16_t queue_;
  uint64_t overruns_ = 0;
  uint64_t verdictErrors_ = 0;
  std::vector<char> rx_ = std::vector<char>(256 << 10);
};


// A held packet: its id, when it arrived, when it is due, and (--duplicate) the copy to send
// after it and where to.
struct Held {
  uint32_t id;
  int64_t arrivalNs;
  int64_t dueNs;
  std::vector<char> copy;
  uint32_t bridgePort;  // Packet::bridgePort
};

// Held packets in the order they leave: a ring, oldest first (deadlines never decrease).
class DelayLine {
 public:
  explicit DelayLine(uint32_t capacity) : ring_(capacity) {}
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Held& front() const { return ring_[head_]; }
  bool dueBy(int64_t now) const { return !empty() && front().dueNs <= now; }
  void push(Held h) {
    ring_[(head_ + size_) % ring_.size()] = std::move(h);
    ++size_;
  }
  Held pop() {
    Held h = std::move(ring_[head_]);
    head_ = (head_ + 1) % ring_.size();
    --size_;
    return h;
  }

 private:
  std::vector<Held> ring_;
  size_t head_ = 0, size_ = 0;
};

// The learned MAC address behind each port of the bridges of this namespace: the first
// unicast address of the port's learned (not local, not static) forwarding-database entries,
// read with an RTM_GETNEIGH dump (AF_BRIDGE) over NETLINK_ROUTE. Enough for emulated clusters,
// which have one host per bridge port.
class BridgeFdb {
 public:
  using Mac = std::array<uint8_t, 6>;
  BridgeFdb() {
    fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    RF_CHECK_ERRNO(fd_, "netlink socket (NETLINK_ROUTE)");
    timeval tv{1, 0};
    RF_CHECK_ERRNO(setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), "SO_RCVTIMEO");
  }
  ~BridgeFdb() { close(fd_); }
  BridgeFdb(const BridgeFdb&) = delete;
  BridgeFdb& operator=(const BridgeFdb&) = delete;

  // The MAC behind bridge port `port` (an ifindex); re-reads the database on a miss, at most
  // every 100 ms. Null when none is known.
  const Mac* macBehind(uint32_t port) {
    auto it = macs_.find(port);
    if (it == macs_.end() && nowNs() - loadedNs_ > 100'000'000) {
      reload();
      it = macs_.find(port);
    }
    return it == macs_.end() ? nullptr : &it->second;
  }

 private:
  void reload() {
    loadedNs_ = nowNs();
    struct {
      nlmsghdr h;
      ndmsg nd;
    } req{};
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = RTM_GETNEIGH;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.h.nlmsg_seq = ++seq_;
    req.nd.ndm_family = AF_BRIDGE;
    if (send(fd_, &req, sizeof req, 0) < 0) return;
    std::vector<char> rx(64 << 10);
    for (;;) {
      ssize_t n = recv(fd_, rx.data(), rx.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // SO_RCVTIMEO: no dump in 1 s
      int left = int(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(rx.data()); NLMSG_OK(h, left);
           h = NLMSG_NEXT(h, left)) {
        if (h->nlmsg_seq != seq_) continue;  // a late answer to an earlier dump
        if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) return;
        if (h->nlmsg_type == RTM_NEWNEIGH) addEntry(h);
      }
    }
  }

  void addEntry(nlmsghdr* h) {
    auto* nd = static_cast<ndmsg*>(NLMSG_DATA(h));
    if (nd->ndm_state & (NUD_PERMANENT | NUD_NOARP)) return;  // local or static
    auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(nd) + NLMSG_ALIGN(sizeof *nd));
    int left = int(h->nlmsg_len) - int(NLMSG_LENGTH(sizeof *nd));
    for (; RTA_OK(a, left); a = RTA_NEXT(a, left)) {
      if (a->rta_type != NDA_LLADDR || RTA_PAYLOAD(a) != sizeof(Mac)) continue;
      Mac mac;
      std::memcpy(mac.data(), RTA_DATA(a), mac.size());
      if ((mac[0] & 1) == 0) macs_.emplace(uint32_t(nd->ndm_ifindex), mac);  // unicast: first
    }
  }

  int fd_ = -1;
  uint32_t seq_ = 0;
  int64_t loadedNs_ = -1'000'000'000;
  std::unordered_map<uint32_t, Mac> macs_;
};

// The second copies of --duplicate, sent so that they leave unimpaired:
//  * a packet this namespace routes (a host's own): whole (IPv4 header included) through a raw
//    socket whose SO_MARK the queue's rule excludes;
//  * a bridged packet: as a frame on the bridge port it left by, to the MAC behind that port
//    (BridgeFdb), through a packet socket, which netfilter does not see.
class Duplicator {
 public:
  explicit Duplicator(uint32_t mark) {
    raw_ = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);  // IPPROTO_RAW: IP_HDRINCL
    RF_CHECK_ERRNO(raw_, "raw IPv4 socket for --duplicate (needs CAP_NET_RAW)");
    RF_CHECK_ERRNO(setsockopt(raw_, SOL_SOCKET, SO_MARK, &mark, sizeof mark),
                   "SO_MARK on the --duplicate socket (needs CAP_NET_ADMIN)");
    frames_ = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0);  // protocol 0: sends only
    RF_CHECK_ERRNO(frames_, "packet socket for --duplicate (needs CAP_NET_RAW)");
  }
  ~Duplicator() {
    close(raw_);
    close(frames_);
  }
  Duplicator(const Duplicator&) = delete;
  Duplicator& operator=(const Duplicator&) = delete;

  // Sends one IPv4 packet again: on bridge port `bridgePort` (an ifindex), or routed to its
  // destination address when 0. False if it could not (not IPv4, no route, no MAC known
  // behind the port, a full socket buffer: it never blocks).
  bool send(const std::vector<char>& packet, uint32_t bridgePort) {
    iphdr ip{};
    if (packet.size() < sizeof ip) return false;
    std::memcpy(&ip, packet.data(), sizeof ip);
    if (ip.version != 4) return false;
    if (bridgePort != 0) {
      const BridgeFdb::Mac* mac = fdb_.macBehind(bridgePort);
      if (mac == nullptr) return false;
      sockaddr_ll to{};
      to.sll_family = AF_PACKET;
      to.sll_protocol = htons(ETH_P_IP);
      to.sll_ifindex = int(bridgePort);
      to.sll_halen = uint8_t(mac->size());
      std::memcpy(to.sll_addr, mac->data(), mac->size());
      return sendTo(frames_, packet, &to, sizeof to);
    }
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = ip.daddr;
    return sendTo(raw_, packet, &to, sizeof to);
  }

 private:
  template <typename Addr>
  static bool sendTo(int fd, const std::vector<char>& packet, const Addr* to, socklen_t len) {
    return sendto(fd, packet.data(), packet.size(), MSG_DONTWAIT,
                  reinterpret_cast<const sockaddr*>(to), len) == ssize_t(packet.size());
  }

  int raw_ = -1, frames_ = -1;
  BridgeFdb fdb_;
};

// Counters and the achieved-delay histogram (1 us bins of the excess over the configured delay).
struct Stats {
  uint64_t packets = 0, bytes = 0, dropped = 0, bypassed = 0;
  uint64_t lost = 0, duplicated = 0, dupFailed = 0, heldBack = 0, reordered = 0;
  int64_t maxNs = 0;
  std::vector<uint64_t> excessUs = std::vector<uint64_t>(kHistogramUs, 0);

  void record(int64_t delayNs, int64_t configuredNs) {
    ++packets;
    if (delayNs > maxNs) maxNs = delayNs;
    int64_t excess = (delayNs - configuredNs) / 1000;
    if (excess < 0) excess = 0;
    if (size_t(excess) < excessUs.size()) ++excessUs[size_t(excess)];  // past it: max stands in
  }
  // Delay in microseconds below which a fraction q of the released packets fall.
  double quantileUs(double q, int64_t configuredUs) const {
    if (packets == 0) return 0;
    uint64_t rank = uint64_t(q * double(packets - 1)) + 1, seen = 0;
    for (size_t i = 0; i < excessUs.size(); ++i) {
      seen += excessUs[i];
      if (seen >= rank) return double(configuredUs) + double(i);
    }
    return double(maxNs) / 1000.0;
  }
};

void printStats(const Options& o, const Stats& s, const NfQueue& q, const char* why) {
  using ull = unsigned long long;
  std::fprintf(stderr,
               "rf_netdelay: stats queue %u delay_us %lld: released %llu packets %llu bytes, "
               "delay_us median %.0f p99 %.0f max %.0f, dropped %llu (limit %u), "
               "lost %llu (loss %g), duplicated %llu (duplicate %g) dup_failed %llu, "
               "held_back %llu (reorder %g) reordered %llu, jitter_us %lld, seed %llu, "
               "bypassed %llu, overruns %llu, verdict_errors %llu%s%s\n",
               o.queue, (long long)o.delayUs, ull(s.packets), ull(s.bytes),
               s.quantileUs(0.5, o.delayUs), s.quantileUs(0.99, o.delayUs),
               double(s.maxNs) / 1000.0, ull(s.dropped), o.limit, ull(s.lost), o.loss,
               ull(s.duplicated), o.duplicate, ull(s.dupFailed), ull(s.heldBack), o.reorder,
               ull(s.reordered), (long long)o.jitterUs, ull(o.seed), ull(s.bypassed),
               ull(q.overruns()), ull(q.verdictErrors()), why ? ", exit: " : "", why ? why : "");
}

// st_dev/st_ino of a namespace file, or {0,0} when it cannot be read.
std::pair<dev_t, ino_t> nsIdentity(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

// Throws unless /run/netns/NAME is the namespace this process runs in.
void checkNetns(const std::string& name) {
  if (nsIdentity("/run/netns/" + name) != nsIdentity("/proc/self/ns/net")) {
    RF_THROW(ringfold::Error, "not running in network namespace ", name);
  }
}

void writePidFile(const std::string& path, pid_t pid) {
  std::ofstream f(path, std::ios::trunc);
  f << pid << '\n';
  RF_ENFORCE(f.good(), "cannot write pid file ", path);
}

void armAt(int tfd, int64_t deadlineNs) {
  itimerspec its{};
  its.it_value.tv_sec = deadlineNs / 1'000'000'000;
  its.it_value.tv_nsec = deadlineNs % 1'000'000'000;
  RF_CHECK_ERRNO(timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr), "timerfd_settime");
}

// The emulator: the queue, the delay lines, the release timer and the reasons to stop.
class Emulator {
 public:
  // dup: where --duplicate's copies go (null without --duplicate).
  Emulator(const Options& o, NfQueue& q, Duplicator* dup)
      : o_(o), q_(q), dup_(dup), prng_(o.seed), inOrder_(o.limit), heldBack_(o.limit) {}

  // Runs until a reason to stop; returns it, having accepted at once what was still held.
  const char* run() {
    setUp();
    const char* why = loop();
    // Leaving is no reason to drop packets: accept every id up to far past the last one seen
    // (ids compare modulo 2^32), the unread ones included.
    q_.verdictUpTo(lastId_ + (1u << 30), NF_ACCEPT);
    return why;
  }
  const Stats& stats() const { return s_; }

 private:
  void setUp() {
    myNs_ = nsIdentity("/proc/self/ns/net");
    if (!o_.netns.empty()) {
      nsPath_ = "/run/netns/" + o_.netns;
      checkNetns(o_.netns);
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&sigs, sig);
    RF_CHECK_ERRNO(sigprocmask(SIG_BLOCK, &sigs, nullptr), "sigprocmask");
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    RF_CHECK_ERRNO(ep_, "epoll_create1");
    sfd_ = addFd(signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));
    release_ = addFd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    watch_ = addFd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    addFd(q_.fd());
    if (o_.parentPid != 0) {
      pidfd_ = int(syscall(SYS_pidfd_open, o_.parentPid, 0));
      if (pidfd_ < 0 && errno == ESRCH) parentGone_ = true;
      if (pidfd_ >= 0) addFd(pidfd_);  // else (no pidfd_open): kill(pid, 0) on the watch timer
    }
    if (!nsPath_.empty() || (o_.parentPid != 0 && pidfd_ < 0)) {
      itimerspec period{};
      period.it_value.tv_nsec = period.it_interval.tv_nsec = kWatchPeriodNs;
      RF_CHECK_ERRNO(timerfd_settime(watch_, 0, &period, nullptr), "timerfd_settime");
    }
  }

  int addFd(int fd) {
    RF_CHECK_ERRNO(fd, "creating an event fd");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    RF_CHECK_ERRNO(epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev), "epoll_ctl");
    return fd;
  }

  const char* loop() {
    if (parentGone_) return "parent pid already gone";
    epoll_event evs[8];
    for (;;) {
      int n = epoll_wait(ep_, evs, 8, -1);
      if (n < 0 && errno == EINTR) continue;
      RF_CHECK_ERRNO(n, "epoll_wait");
      for (int i = 0; i < n; ++i) {
        if (const char* why = handle(evs[i].data.fd)) return why;
      }
      int64_t next = nextDueNs();
      if (next >= 0 && next != armedNs_) {
        armedNs_ = next;
        armAt(release_, armedNs_);
      }
    }
  }

  // The earliest deadline of the held packets, or -1 when none is held.
  int64_t nextDueNs() const {
    if (inOrder_.empty()) return heldBack_.empty() ? -1 : heldBack_.front().dueNs;
    if (heldBack_.empty()) return inOrder_.front().dueNs;
    return std::min(inOrder_.front().dueNs, heldBack_.front().dueNs);
  }

  // One ready fd; returns a reason to stop, or nullptr.
  const char* handle(int fd) {
    uint64_t ticks;
    if (fd == q_.fd()) {
      q_.drain(64, [this](const Packet& p) { onPacket(p); });
    } else if (fd == release_) {
      (void)!read(release_, &ticks, sizeof ticks);
      armedNs_ = -1;
      releaseDue(nowNs());
    } else if (fd == sfd_) {
      signalfd_siginfo si{};
      while (read(sfd_, &si, sizeof si) == ssize_t(sizeof si)) {
        if (si.ssi_signo == SIGUSR1) {
          printStats(o_, s_, q_, nullptr);
        } else {
          return si.ssi_signo == SIGINT ? "SIGINT" : si.ssi_signo == SIGHUP ? "SIGHUP" : "SIGTERM";
        }
      }
    } else if (fd == pidfd_) {
      return "parent exited";
    } else if (fd == watch_) {
      (void)!read(watch_, &ticks, sizeof ticks);
      if (!nsPath_.empty() && nsIdentity(nsPath_) != myNs_) return "namespace deleted";
      if (o_.parentPid != 0 && pidfd_ < 0 && kill(o_.parentPid, 0) != 0 && errno == ESRCH) {
        return "parent exited";
      }
    }
    return nullptr;
  }

  // A new packet: decided (four draws, always, so decisions depend only on the arrival index),
  // then dropped or held.
  void onPacket(const Packet& p) {
    const uint32_t id = p.id;
    if (seenAny_ && int32_t(id - lastId_) > 1) s_.bypassed += id - lastId_ - 1;
    seenAny_ = true;
    lastId_ = id;
    const bool lose = prng_.uniform() < o_.loss;
    const bool duplicate = prng_.uniform() < o_.duplicate;
    const bool holdBack = prng_.uniform() < o_.reorder;
    const int64_t jitterNs = int64_t(prng_.uniform() * double(o_.jitterUs + 1)) * 1000;
    if (lose) {
      q_.verdictOne(id, NF_DROP);
      ++s_.lost;
      return;
    }
    if (inOrder_.size() + heldBack_.size() >= o_.limit) {
      q_.verdictOne(id, NF_DROP);
      ++s_.dropped;
      if ((s_.dropped & (s_.dropped - 1)) == 0) {  // the 1st, 2nd, 4th, 8th... drop
        std::fprintf(stderr, "rf_netdelay: queue %u: %u packets held (--limit), dropped %llu\n",
                     o_.queue, o_.limit, (unsigned long long)s_.dropped);
      }
      return;
    }
    s_.bytes += p.length;
    const int64_t now = nowNs();
    // In order: never before the packet ahead (jitter does not reorder).
    lastDueNs_ = std::max(now + o_.delayUs * 1000 + jitterNs, lastDueNs_);
    Held h{id, now, lastDueNs_, {}, p.bridgePort};
    if (duplicate) {
      if (p.bytes.size() == p.length) {
        h.copy.assign(p.bytes.begin(), p.bytes.end());
      } else {
        ++s_.dupFailed;  // not copied whole (cannot happen with wholeCopies)
      }
    }
    if (holdBack) {
      ++s_.heldBack;
      h.dueNs += o_.reorderUs * 1000;
      heldBack_.push(std::move(h));
    } else {
      inOrder_.push(std::move(h));
    }
  }

  // Accepts every held packet whose time has come, in deadline order.
  void releaseDue(int64_t now) {
    for (;;) {
      const bool inOrderDue = inOrder_.dueBy(now), heldBackDue = heldBack_.dueBy(now);
      if (!inOrderDue && !heldBackDue) break;
      if (inOrderDue && (!heldBackDue || inOrder_.front().dueNs <= heldBack_.front().dueNs)) {
        batch_.push_back(inOrder_.pop());
        continue;
      }
      flushBatch(now);
      Held h = heldBack_.pop();
      if (releasedAny_ && idAfter(newestReleased_, h.id)) ++s_.reordered;  // was overtaken
      q_.verdictOne(h.id, NF_ACCEPT);
      released(h, now);
    }
    flushBatch(now);
  }

  // Accepts batch_, a run of in-order packets: with one batch verdict up to the last, unless a
  // held-back packet older than it is still queued (the batch verdict would accept it too).
  void flushBatch(int64_t now) {
    if (batch_.empty()) return;
    const uint32_t last = batch_.back().id;
    if (heldBack_.empty() || idAfter(heldBack_.front().id, last)) {
      q_.verdictUpTo(last, NF_ACCEPT);
    } else {
      for (const Held& h : batch_) q_.verdictOne(h.id, NF_ACCEPT);
    }
    for (const Held& h : batch_) released(h, now);
    batch_.clear();
  }

  // After its verdict: a packet's copy goes out, and it counts.
  void released(const Held& h, int64_t now) {
    s_.record(now - h.arrivalNs, o_.delayUs * 1000);
    if (!releasedAny_ || idAfter(h.id, newestReleased_)) newestReleased_ = h.id;
    releasedAny_ = true;
    if (h.copy.empty()) return;
    if (dup_->send(h.copy, h.bridgePort)) {
      ++s_.duplicated;
    } else {
      ++s_.dupFailed;
    }
  }

  const Options& o_;
  NfQueue& q_;
  Duplicator* const dup_;
  Prng prng_;
  DelayLine inOrder_;        // packets that leave in arrival order
  DelayLine heldBack_;       // --reorder's packets, overtaken by the others
  std::vector<Held> batch_;  // releaseDue's run of in-order packets (kept: no allocation)
  int64_t lastDueNs_ = 0;    // the deadline of the last packet held in order
  Stats s_;
  std::pair<dev_t, ino_t> myNs_{};
  std::string nsPath_;
  int ep_ = -1, sfd_ = -1, release_ = -1, watch_ = -1, pidfd_ = -1;
  bool parentGone_ = false;
  int64_t armedNs_ = -1;  // deadline the release timer is set for (-1: none)
  uint32_t lastId_ = 0;
  bool seenAny_ = false;
  uint32_t newestReleased_ = 0;  // the newest packet id accepted so far
  bool releasedAny_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parseOptions(argc, argv);
    prctl(PR_SET_TIMERSLACK, 1UL);  // timers fire when asked, not up to 50 us later
    if (!o.netns.empty()) checkNetns(o.netns);  // before --daemon detaches: fail in the foreground
    // Loss, duplication and reordering act on wire packets, not on 64 KiB GSO packets.
    const bool perWirePacket = o.loss > 0 || o.duplicate > 0 || o.reorder > 0;
    NfQueue q(o.queue, o.limit * 2, perWirePacket, /*wholeCopies=*/o.duplicate > 0);
    std::unique_ptr<Duplicator> dup;
    if (o.duplicate > 0) dup = std::make_unique<Duplicator>(o.dupMark);
    if (o.daemon) {
      std::fflush(nullptr);
      pid_t child = fork();
      RF_CHECK_ERRNO(child, "fork");
      if (child > 0) {
        if (!o.pidFile.empty()) writePidFile(o.pidFile, child);
        _exit(0);
      }
      setsid();
    } else if (!o.pidFile.empty()) {
      writePidFile(o.pidFile, getpid());
    }
    if (o.rtPriority > 0) {
      sched_param sp{};
      sp.sched_priority = o.rtPriority;
      if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
        std::fprintf(stderr, "rf_netdelay: SCHED_FIFO %d refused (%s); running unprioritised\n",
                     o.rtPriority, std::strerror(errno));
      }
    }
    Emulator e(o, q, dup.get());
    const char* why = e.run();
    if (o.stats) printStats(o, e.stats(), q, why);
    if (!o.pidFile.empty()) unlink(o.pidFile.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rf_netdelay: error: %s\n", e.what());
    return 1;
  }
}
