// rf_netdelay: a packet-delay emulator for the emulated cluster (scripts/netns_lib.sh
// netns_delay, bench/compare/netns_cluster.sh), for kernels built without netem.
//
// Contract. Bound to NFQUEUE queue Q of the network namespace it runs in, it holds every packet
// that a rule sends to Q (`iptables -t mangle -A POSTROUTING ! -o lo -j NFQUEUE --queue-num Q
// --queue-bypass`) for --delay-us microseconds after it reads the packet's notification, then
// accepts it. Packets leave in arrival order: one fixed delay and a FIFO, released with batch
// verdicts ("accept every id up to N"). Nothing is dropped except past --limit held packets
// (each such drop is counted and said on stderr); the kernel's queue is twice as long, and
// fail-open, so a stalled emulator lets packets through undelayed instead of blocking the host.
//
// Mechanism. NFQUEUE over raw netlink (NETLINK_NETFILTER): the kernel keeps the packet and
// sends 16 bytes of it plus metadata (copy range 16, NFQA_CFG_F_GSO so GSO packets are queued
// whole, not segmented), so the cost is per packet, not per byte. A timerfd on CLOCK_MONOTONIC
// (absolute, armed for the oldest packet's deadline) and epoll wait without spinning. Releasing
// runs the rest of the transmit path (qdisc, veth) in this process's system calls.
//
// Scheduling. The wait is a kernel timer, but the release runs when this process gets a CPU:
// on busy CPUs --rt-priority (SCHED_FIFO; netns_delay uses 10) keeps the p99 near the median.
//
// Lifetime. Exits cleanly on SIGTERM, SIGINT or SIGHUP (accepting what it holds at once), when
// --parent-pid exits (pidfd), or when /run/netns/--netns no longer names the namespace it runs
// in (polled every 200 ms). Closing its socket destroys the queue; the rule's bypass flag then
// passes packets undelayed. With --stats it prints one line at exit (and on SIGUSR1): packets
// and bytes released, the achieved delay (release time minus arrival time: median, p99, max),
// drops, and packets the kernel let through undelayed ("bypassed", seen as gaps in packet ids).
// <arpa/inet.h> (glibc's netinet/in.h) before the uapi headers, which then skip linux/in.h.
#include <arpa/inet.h>
#include <getopt.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
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

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"

namespace {

using ringfold::InvalidArgument;

constexpr uint32_t kCopyBytes = 16;            // payload bytes copied per packet (length only)
constexpr int64_t kWatchPeriodNs = 200'000'000;  // namespace / parent check (pidfd fallback)
constexpr size_t kHistogramUs = 100'000;       // delay excess histogram: 1 us bins up to 100 ms

int64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct Options {
  int64_t delayUs = -1;
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
    "usage: rf_netdelay --delay-us US [--queue Q] [--limit N] [--parent-pid PID] [--netns NAME]\n"
    "                   [--rt-priority P] [--daemon] [--pid-file FILE] [--stats]\n"
    "  Holds every packet of NFQUEUE queue Q (default 0) of this namespace for US microseconds,\n"
    "  then accepts it, in order. --limit: packets held at most (default 16384; more are dropped\n"
    "  and counted). --parent-pid: exit when PID exits. --netns: exit when /run/netns/NAME stops\n"
    "  naming this namespace. --rt-priority: run SCHED_FIFO at P (1-99; default 0: not), so that\n"
    "  busy CPUs do not delay releases. --daemon: detach once the queue is bound (the foreground\n"
    "  process exits 0 then, or 1 on a setup error). --stats: one statistics line on stderr at\n"
    "  exit, and on SIGUSR1.\n";

int64_t parseInt(const char* flag, const char* text, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    RF_THROW(InvalidArgument, flag, " wants an integer in [", lo, ", ", hi, "], got '", text, "'");
  }
  return v;
}

Options parseOptions(int argc, char** argv) {
  static const option kLong[] = {
      {"delay-us", required_argument, nullptr, 'd'}, {"queue", required_argument, nullptr, 'q'},
      {"limit", required_argument, nullptr, 'l'},    {"parent-pid", required_argument, nullptr, 'p'},
      {"netns", required_argument, nullptr, 'n'},    {"pid-file", required_argument, nullptr, 'f'},
      {"rt-priority", required_argument, nullptr, 'r'},
      {"daemon", no_argument, nullptr, 'D'},         {"stats", no_argument, nullptr, 's'},
      {"help", no_argument, nullptr, 'h'},           {nullptr, 0, nullptr, 0}};
  Options o;
  int c;
  while ((c = getopt_long(argc, argv, "", kLong, nullptr)) != -1) {
    switch (c) {
      case 'd': o.delayUs = parseInt("--delay-us", optarg, 0, 10'000'000); break;
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
  if (optind != argc || o.delayUs < 0) {
    std::fputs(kUsage, stderr);
    std::exit(2);
  }
  if (o.netns.find('/') != std::string::npos) RF_THROW(InvalidArgument, "--netns takes a name");
  return o;
}

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
class NfQueue {
 public:
  NfQueue(uint16_t queue, uint32_t kernelMaxlen) : queue_(queue) {
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
    params.copy_range = htonl(kCopyBytes);
    params.copy_mode = NFQNL_COPY_PACKET;
    const uint32_t flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
    NlMessage m(NFQNL_MSG_CONFIG, NLM_F_ACK, queue);
    m.attr(NFQA_CFG_CMD, cmd).attr(NFQA_CFG_PARAMS, params);
    m.attr(NFQA_CFG_QUEUE_MAXLEN, htonl(kernelMaxlen));
    m.attr(NFQA_CFG_MASK, htonl(flags)).attr(NFQA_CFG_FLAGS, htonl(flags));
    sendToKernel(m);
    awaitAck();
  }
  ~NfQueue() { close(fd_); }
  NfQueue(const NfQueue&) = delete;
  NfQueue& operator=(const NfQueue&) = delete;

  int fd() const { return fd_; }

  // Reads what is queued on the socket now (at most `rounds` reads) and calls
  // onPacket(id, length) for each packet notification. Returns false once the socket is empty.
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
    uint32_t id = 0, capLen = 0, payloadLen = 0;
    bool haveId = false;
    while (left >= int(NLA_HDRLEN) && a->nla_len >= NLA_HDRLEN && int(a->nla_len) <= left) {
      const char* data = reinterpret_cast<const char*>(a) + NLA_HDRLEN;
      switch (a->nla_type & NLA_TYPE_MASK) {
        case NFQA_PACKET_HDR: {
          nfqnl_msg_packet_hdr ph;
          std::memcpy(&ph, data, sizeof ph);
          id = ntohl(ph.packet_id);
          haveId = true;
          break;
        }
        case NFQA_CAP_LEN: std::memcpy(&capLen, data, 4); capLen = ntohl(capLen); break;
        case NFQA_PAYLOAD: payloadLen = a->nla_len - NLA_HDRLEN; break;
        default: break;
      }
      left -= NLA_ALIGN(a->nla_len);
      a = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(a) + NLA_ALIGN(a->nla_len));
    }
    if (haveId) onPacket(id, capLen != 0 ? capLen : payloadLen);
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

// The held packets, oldest first: a ring of (id, arrival time).
class DelayLine {
 public:
  struct Held {
    uint32_t id;
    int64_t arrivalNs;
  };
  explicit DelayLine(uint32_t capacity) : ring_(capacity) {}
  bool full() const { return size_ == ring_.size(); }
  bool empty() const { return size_ == 0; }
  const Held& front() const { return ring_[head_]; }
  void push(Held h) {
    ring_[(head_ + size_) % ring_.size()] = h;
    ++size_;
  }
  void pop() {
    head_ = (head_ + 1) % ring_.size();
    --size_;
  }

 private:
  std::vector<Held> ring_;
  size_t head_ = 0, size_ = 0;
};

// Counters and the achieved-delay histogram (1 us bins of the excess over the configured delay).
struct Stats {
  uint64_t packets = 0, bytes = 0, dropped = 0, bypassed = 0;
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
  std::fprintf(stderr,
               "rf_netdelay: stats queue %u delay_us %lld: released %llu packets %llu bytes, "
               "delay_us median %.0f p99 %.0f max %.0f, dropped %llu (limit %u), bypassed %llu, "
               "overruns %llu, verdict_errors %llu%s%s\n",
               o.queue, (long long)o.delayUs, (unsigned long long)s.packets,
               (unsigned long long)s.bytes, s.quantileUs(0.5, o.delayUs),
               s.quantileUs(0.99, o.delayUs), double(s.maxNs) / 1000.0,
               (unsigned long long)s.dropped, o.limit, (unsigned long long)s.bypassed,
               (unsigned long long)q.overruns(), (unsigned long long)q.verdictErrors(),
               why ? ", exit: " : "", why ? why : "");
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

// The emulator: the queue, the delay line, the release timer and the reasons to stop.
class Emulator {
 public:
  Emulator(const Options& o, NfQueue& q) : o_(o), q_(q), delayNs_(o.delayUs * 1000), line_(o.limit) {}

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
      if (!line_.empty() && armedNs_ != line_.front().arrivalNs + delayNs_) {
        armedNs_ = line_.front().arrivalNs + delayNs_;
        armAt(release_, armedNs_);
      }
    }
  }

  // One ready fd; returns a reason to stop, or nullptr.
  const char* handle(int fd) {
    uint64_t ticks;
    if (fd == q_.fd()) {
      q_.drain(64, [this](uint32_t id, uint32_t len) { onPacket(id, len); });
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

  void onPacket(uint32_t id, uint32_t len) {
    if (seenAny_ && int32_t(id - lastId_) > 1) s_.bypassed += id - lastId_ - 1;
    seenAny_ = true;
    lastId_ = id;
    if (line_.full()) {
      q_.verdictOne(id, NF_DROP);
      ++s_.dropped;
      if ((s_.dropped & (s_.dropped - 1)) == 0) {  // the 1st, 2nd, 4th, 8th... drop
        std::fprintf(stderr, "rf_netdelay: queue %u: %u packets held (--limit), dropped %llu\n",
                     o_.queue, o_.limit, (unsigned long long)s_.dropped);
      }
      return;
    }
    s_.bytes += len;
    line_.push({id, nowNs()});
  }

  // Accepts, with one batch verdict, every held packet whose time has come.
  void releaseDue(int64_t now) {
    bool any = false;
    uint32_t upTo = 0;
    while (!line_.empty() && line_.front().arrivalNs + delayNs_ <= now) {
      s_.record(now - line_.front().arrivalNs, delayNs_);
      upTo = line_.front().id;
      any = true;
      line_.pop();
    }
    if (any) q_.verdictUpTo(upTo, NF_ACCEPT);
  }

  const Options& o_;
  NfQueue& q_;
  const int64_t delayNs_;
  DelayLine line_;
  Stats s_;
  std::pair<dev_t, ino_t> myNs_{};
  std::string nsPath_;
  int ep_ = -1, sfd_ = -1, release_ = -1, watch_ = -1, pidfd_ = -1;
  bool parentGone_ = false;
  int64_t armedNs_ = -1;  // deadline the release timer is set for (-1: none)
  uint32_t lastId_ = 0;
  bool seenAny_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parseOptions(argc, argv);
    prctl(PR_SET_TIMERSLACK, 1UL);  // timers fire when asked, not up to 50 us later
    if (!o.netns.empty()) checkNetns(o.netns);  // before --daemon detaches: fail in the foreground
    NfQueue q(o.queue, o.limit * 2);
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
    Emulator e(o, q);
    const char* why = e.run();
    if (o.stats) printStats(o, e.stats(), q, why);
    if (!o.pidFile.empty()) unlink(o.pidFile.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rf_netdelay: error: %s\n", e.what());
    return 1;
  }
}
