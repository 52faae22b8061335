#include "collectives/allreduce_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "collectives/broadcast.h"
#include "collectives/communicator.h"
#include "collectives/sendrecv.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"

namespace ringfold::coll {

namespace {

using Clock = std::chrono::steady_clock;

constexpr AllreduceAlgorithm kAlgorithms[] = {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect,
                                              AllreduceAlgorithm::kTree, AllreduceAlgorithm::kHierarchical};

int ceilLog2(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

// The ring's chunk: the configured one, doubled while a round's start-up exceeds 10% of its
// transfer (alpha > 0.1 c beta), at most 64 MiB; 0 stays 0 (one round).
size_t ringChunk(const LinkCost& link, size_t configured) {
  if (configured == 0) return 0;
  size_t c = configured;
  while (c < (size_t{64} << 20) && link.alpha > 0.1 * static_cast<double>(c) * link.beta) c *= 2;
  return c;
}

// The links a flat algorithm crosses: n ranks on `hosts` hosts of l ranks each (consecutive
// ranks share a host), local and remote constants.
struct Links {
  LinkCost local, remote;
  int n = 1, hosts = 1, l = 1;
  bool spans() const { return hosts > 1; }
  const LinkCost& slowest() const { return spans() ? remote : local; }
  // alpha of a hop, `remoteShare` of the hops crossing hosts.
  double alpha(double remoteShare) const {
    return spans() ? remoteShare * remote.alpha + (1 - remoteShare) * local.alpha : local.alpha;
  }
};

// One flat algorithm's predicted seconds; fills the choice's tree segment and ring chunk.
//   ring  : of its n edges `hosts` cross hosts, so that share of a chunk's 2(n-1) dependent hops
//           pays the remote latency; each remote edge carries 2(n-1)/n S.
//   direct: n-1 messages leave each rank at once (overhead each); a host's link carries its l
//           ranks' (n-l) S.
//   tree  : the levels with b < l join ranks of one host; a host's link carries its ranks'
//           sends, about (l+1)/2 x 2S for trees whose neighbours are often on one host.
double flatSeconds(AllreduceAlgorithm a, const Links& k, double gamma, double s, const Knobs& knobs,
                   AllreduceChoice& c) {
  const int n = k.n;
  const double f = static_cast<double>(n - 1) / n;
  const LinkCost& slow = k.slowest();
  switch (a) {
    case AllreduceAlgorithm::kRing: {
      // On one host the configured chunk stands (its rounds keep a chunk in cache, as measured);
      // across hosts it grows until a round's start-up is small against its transfer.
      c.ringChunkBytes = k.spans() ? ringChunk(slow, knobs.ringChunkBytes) : knobs.ringChunkBytes;
      const double perRound = static_cast<double>(n) * static_cast<double>(c.ringChunkBytes);
      const double rounds = c.ringChunkBytes == 0 ? 1.0 : std::max(1.0, std::ceil(s / perRound));
      // Each of a round's 2(n-1) steps is a message sent and one received: a hop's latency and
      // a message's overhead (over shm the overhead outweighs the latency, and at 2 ranks a
      // direct exchange's one message beats the ring's two steps, as measured).
      const double hop = k.alpha(static_cast<double>(k.hosts) / n) + slow.overhead;
      return rounds * 2.0 * (n - 1) * hop + 2.0 * f * s * slow.beta + f * s * gamma;
    }
    case AllreduceAlgorithm::kDirect: {
      const double wire = k.spans() ? std::max(static_cast<double>(k.l) * (n - k.l) * s * k.remote.beta,
                                               (k.l - 1) * s * k.local.beta)
                                    : (n - 1) * s * k.local.beta;
      return slow.alpha + (n - 1) * slow.overhead + wire + (n - 1) * s * gamma;
    }
    case AllreduceAlgorithm::kTree: {
      const double d = ceilLog2(n);
      const double localLevels = std::min(d, static_cast<double>(ceilLog2(k.l)));
      const double hop = k.alpha(d > 0 ? (d - localLevels) / d : 0.0);
      const double share = k.spans() ? (k.l + 1) / 2.0 : 1.0;
      auto at = [&](double seg) {
        return 2.0 * d * (hop + seg * slow.beta) + 2.0 * s * slow.beta * share + s * gamma +
               3.0 * std::ceil(s / seg) * slow.overhead;
      };
      double best = at(std::max(1.0, s / 2)), bestSeg = std::max(1.0, s / 2);
      for (size_t seg = size_t{64} << 10; seg <= knobs.segmentBytes && seg < s / 2; seg *= 2) {
        const double t = at(static_cast<double>(seg));
        if (t < best) best = t, bestSeg = static_cast<double>(seg);
      }
      c.treeSegmentBytes = std::min<size_t>(knobs.segmentBytes, static_cast<size_t>(bestSeg));
      return best;
    }
    default:
      return -1;
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

// ---- constants ----

std::string ModelConstants::text() const {
  std::ostringstream out;
  out.precision(4);
  out << "local_alpha=" << local.alpha << " local_beta=" << local.beta << " local_overhead=" << local.overhead
      << " remote_alpha=" << remote.alpha << " remote_beta=" << remote.beta << " remote_overhead=" << remote.overhead
      << " gamma=" << gamma;
  return out.str();
}

ModelConstants ModelConstants::parse(const std::string& text, const std::string& origin) {
  ModelConstants m;
  std::map<std::string, double*> fields = {
      {"local_alpha", &m.local.alpha},   {"local_beta", &m.local.beta},   {"local_overhead", &m.local.overhead},
      {"remote_alpha", &m.remote.alpha}, {"remote_beta", &m.remote.beta}, {"remote_overhead", &m.remote.overhead},
      {"gamma", &m.gamma}};
  std::istringstream in(text);
  std::string word;
  size_t seen = 0;
  while (in >> word) {
    const size_t eq = word.find('=');
    const std::string key = word.substr(0, eq);
    auto it = fields.find(key);
    if (eq == std::string::npos || it == fields.end()) {
      RF_THROW(InvalidArgument, origin, ": '", word, "' is not a model constant (expected key=value with keys ",
               "local_alpha, local_beta, local_overhead, remote_alpha, remote_beta, remote_overhead, gamma)");
    }
    const std::string value = word.substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v) || v < 0) {
      RF_THROW(InvalidArgument, origin, ": ", key, "='", value, "' is not a non-negative number of seconds");
    }
    *it->second = v;
    ++seen;
  }
  if (seen != fields.size()) {
    RF_THROW(InvalidArgument, origin, ": expected the ", fields.size(), " constants of `RINGFOLD_MODEL_SAVE`'s output, got ", seen);
  }
  return m;
}

// ---- allowed algorithms ----

AlgorithmSet AlgorithmSet::all() {
  AlgorithmSet s;
  for (AllreduceAlgorithm a : kAlgorithms) s.bits_ |= 1u << static_cast<int>(a);
  return s;
}

AlgorithmSet AlgorithmSet::automatic() { return all(); }

AlgorithmSet AlgorithmSet::parse(const std::string& spec) {
  std::string s = lower(spec);
  s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }), s.end());
  if (s.rfind("allreduce:", 0) == 0) s = s.substr(10);
  if (s.empty() || s == "auto") return automatic();
  const bool exclude = s[0] == '^';
  if (exclude) s = s.substr(1);
  AlgorithmSet named;
  std::istringstream in(s);
  std::string name;
  while (std::getline(in, name, ',')) {
    bool known = false;
    for (AllreduceAlgorithm a : kAlgorithms) {
      if (name == algorithmName(a)) named.bits_ |= 1u << static_cast<int>(a), known = true;
    }
    if (!known) {
      RF_THROW(InvalidArgument, params::kAlgo.name, "='", spec, "': unknown algorithm '", name,
               "'; use auto, or a list of ring, direct, tree, hierarchical (\"^\" first to exclude them)");
    }
  }
  AlgorithmSet out = exclude ? automatic() : named;
  if (exclude) out.bits_ &= ~named.bits_;
  if (out.bits_ == 0) RF_THROW(InvalidArgument, params::kAlgo.name, "='", spec, "' leaves no algorithm");
  return out;
}

std::string AlgorithmSet::text() const {
  std::string out;
  for (AllreduceAlgorithm a : kAlgorithms) {
    if (has(a)) out += (out.empty() ? "" : ",") + std::string(algorithmName(a));
  }
  return out;
}

// ---- predictions ----

AllreduceChoice predictAllreduce(const ModelConstants& m, const JobShape& shape, size_t bytes, AllreduceAlgorithm a,
                                 const Knobs& knobs, AlgorithmSet allowed) {
  AllreduceChoice c;
  c.algorithm = a;
  c.treeSegmentBytes = knobs.segmentBytes;
  c.ringChunkBytes = knobs.ringChunkBytes;
  const double s = static_cast<double>(bytes);
  const int n = shape.size;
  if (a != AllreduceAlgorithm::kHierarchical) {
    // Uneven hosts: as if every host ran the largest share.
    const int l = shape.hosts > 1 ? (n + shape.hosts - 1) / shape.hosts : n;
    c.seconds = flatSeconds(a, Links{m.local, m.remote, n, shape.hosts, l}, m.gamma, s, knobs, c);
    return c;
  }
  const int l = shape.localSize, h = shape.hosts;
  if (h < 2 || l < 2 || !shape.homogeneous || l * h != n) {
    c.seconds = -1;
    return c;
  }
  const double f = static_cast<double>(l - 1) / l;
  const double local = 2.0 * (l - 1) * m.local.alpha + 2.0 * f * s * m.local.beta + f * s * m.gamma;
  Links cross{m.local, m.remote, h, h, 1};
  cross.remote.beta *= l;  // the L cross allreduces of a host share its link
  const AllreduceAlgorithm flat[] = {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kTree};
  bool any = false;
  for (AllreduceAlgorithm x : flat) any = any || allowed.has(x);
  double best = -1;
  for (AllreduceAlgorithm x : flat) {
    if (any && !allowed.has(x)) continue;
    AllreduceChoice among = c;
    const double t = flatSeconds(x, cross, m.gamma, s / l, knobs, among);
    if (best < 0 || t < best) {
      best = t;
      c.cross = x;
      c.treeSegmentBytes = among.treeSegmentBytes;
      c.ringChunkBytes = among.ringChunkBytes;
    }
  }
  c.seconds = local + best;
  return c;
}

AllreduceChoice chooseAllreduce(const ModelConstants& m, const JobShape& shape, size_t bytes, AlgorithmSet allowed,
                                const Knobs& knobs) {
  AllreduceChoice best;
  best.seconds = -1;
  for (AllreduceAlgorithm a : kAlgorithms) {
    if (!allowed.has(a)) continue;
    const AllreduceChoice c = predictAllreduce(m, shape, bytes, a, knobs, allowed);
    if (c.seconds >= 0 && (best.seconds < 0 || c.seconds < best.seconds)) best = c;
  }
  // Nothing allowed applies (hierarchical alone on one host): the ring always does.
  return best.seconds >= 0 ? best : predictAllreduce(m, shape, bytes, AllreduceAlgorithm::kRing, knobs);
}

// ---- the chooser ----

AllreduceChooser::AllreduceChooser(const ModelConstants& model, const JobShape& shape, const Rules& rules)
    : model_(model), shape_(shape), rules_(rules) {
  if (rules_.hierarchical == true) rules_.allowed.add(AllreduceAlgorithm::kHierarchical);
  const bool fits = predictAllreduce(model_, shape_, 0, AllreduceAlgorithm::kHierarchical, rules_.knobs).seconds >= 0;
  if (rules_.hierarchical == false || !fits) rules_.allowed.remove(AllreduceAlgorithm::kHierarchical);
  if (rules_.hierarchical == true && !fits) {
    RF_LOG(kInfo) << "hierarchical allreduce asked for, but the job does not fit it (" << shape_.hosts << " hosts, "
                  << (shape_.homogeneous ? std::to_string(shape_.localSize) : std::string("uneven")) << " ranks per host)";
  }
}

const AllreduceChoice& AllreduceChooser::choose(size_t bytes) {
  auto it = memo_.find(bytes);
  if (it != memo_.end()) return it->second;
  if (memo_.size() >= 4096) memo_.clear();  // bounded: a job with ever new sizes
  const AllreduceChoice c = compute(bytes);
  RF_LOG(kDebug) << "allreduce of " << bytes << " bytes on " << shape_.size << " ranks: " << algorithmName(c.algorithm)
                 << (c.algorithm == AllreduceAlgorithm::kHierarchical ? std::string(" (") + algorithmName(c.cross) + " among hosts)" : "")
                 << (c.algorithm == AllreduceAlgorithm::kTree || c.cross == AllreduceAlgorithm::kTree
                         ? ", tree segments of " + std::to_string(c.treeSegmentBytes) + " bytes" : "")
                 << (c.algorithm == AllreduceAlgorithm::kRing || c.cross == AllreduceAlgorithm::kRing
                         ? ", ring chunks of " + std::to_string(c.ringChunkBytes) + " bytes" : "")
                 << ", predicted " << c.seconds * 1e6 << " us";
  return memo_.emplace(bytes, c).first->second;
}

AllreduceChoice AllreduceChooser::compute(size_t bytes) const {
  AlgorithmSet allowed = rules_.allowed;
  if (rules_.directMaxBytes) {
    if (bytes <= *rules_.directMaxBytes && allowed.has(AllreduceAlgorithm::kDirect)) {
      return predictAllreduce(model_, shape_, bytes, AllreduceAlgorithm::kDirect, rules_.knobs);
    }
    allowed.remove(AllreduceAlgorithm::kDirect);
  }
  if (rules_.hierarchical == true && allowed.has(AllreduceAlgorithm::kHierarchical)) {
    return predictAllreduce(model_, shape_, bytes, AllreduceAlgorithm::kHierarchical, rules_.knobs, allowed);
  }
  return chooseAllreduce(model_, shape_, bytes, allowed, rules_.knobs);
}

JobShape jobShape(int size, const std::vector<int>& hostOf) {
  JobShape s;
  s.size = size;
  if (hostOf.empty()) {
    s.localSize = size;
    return s;
  }
  std::vector<int> count;
  for (int h : hostOf) {
    if (h >= static_cast<int>(count.size())) count.resize(h + 1, 0);
    ++count[h];
  }
  s.hosts = static_cast<int>(count.size());
  s.localSize = count[0];
  for (int c : count) s.homogeneous = s.homogeneous && c == count[0];
  return s;
}

// ---- measurement ----

namespace {

// The lower median: of two samples the less disturbed one.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The words of the measurement (8 bytes each; rank 0's first word says whether it measures, as
// it may read a file instead). A word's first byte is its command, its last four a count.
enum Command : uint8_t {
  kCmdDone = 0,   // the measurement is over (or never starts)
  kCmdEcho = 1,   // send this word back
  kCmdLarge = 2,  // a message of `count` bytes follows: send it back
  kCmdBurst = 3,  // `count` - 1 more words follow: then send one back
};
constexpr size_t kLargestBytes = size_t{1} << 20;

struct Word {
  std::byte bytes[8] = {};
  Word() = default;
  Word(Command c, uint32_t count) {
    bytes[0] = static_cast<std::byte>(c);
    std::memcpy(bytes + 4, &count, 4);
  }
  Command command() const { return static_cast<Command>(bytes[0]); }
  uint32_t count() const {
    uint32_t c;
    std::memcpy(&c, bytes + 4, 4);
    return c;
  }
};

// Rank 0's side over the communicator (the partner's: answer()).
class CommProbe final : public LinkProbe {
 public:
  CommProbe(Communicator& comm, int partner) : comm_(comm), partner_(partner), big_(kLargestBytes) {}
  double now() override { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }
  void roundTrip(size_t bytes) override {
    if (bytes <= 8) {
      put(Word(kCmdEcho, 0));
      get();
      return;
    }
    RF_ENFORCE(bytes <= big_.size(), "calibration message of ", bytes, " bytes");
    put(Word(kCmdLarge, static_cast<uint32_t>(bytes)));
    send(comm_, big_.data(), bytes, DataType::kUint8, partner_);
    recv(comm_, big_.data(), bytes, DataType::kUint8, partner_);
  }
  void burst(int messages) override {
    put(Word(kCmdBurst, static_cast<uint32_t>(messages)));
    for (int i = 1; i < messages; ++i) put(Word(kCmdEcho, 0));
    get();
  }
  void done() { put(Word(kCmdDone, 0)); }

 private:
  void put(const Word& w) { send(comm_, w.bytes, 8, DataType::kUint8, partner_); }
  void get() {
    Word w;
    recv(comm_, w.bytes, 8, DataType::kUint8, partner_);
  }
  Communicator& comm_;
  int partner_;
  std::vector<std::byte> big_;
};

// The partner's side: answers rank 0's words until kCmdDone.
void answer(Communicator& comm) {
  std::vector<std::byte> big;
  for (;;) {
    Word w;
    recv(comm, w.bytes, 8, DataType::kUint8, 0);
    switch (w.command()) {
      case kCmdDone: return;
      case kCmdEcho: send(comm, w.bytes, 8, DataType::kUint8, 0); break;
      case kCmdLarge:
        RF_ENFORCE(w.count() <= kLargestBytes, "calibration message of ", w.count(), " bytes");
        big.resize(std::max<size_t>(big.size(), w.count()));
        recv(comm, big.data(), w.count(), DataType::kUint8, 0);
        send(comm, big.data(), w.count(), DataType::kUint8, 0);
        break;
      case kCmdBurst: {
        Word each;
        for (uint32_t i = 1, n = w.count(); i < n; ++i) recv(comm, each.bytes, 8, DataType::kUint8, 0);
        send(comm, w.bytes, 8, DataType::kUint8, 0);
        break;
      }
      default:
        RF_THROW(MismatchError, "calibration: unknown command ", static_cast<int>(w.command()),
                 " from rank 0 (is every rank running the same ringfold version?)");
    }
  }
}

double measureGamma(Communicator& comm) {
  constexpr size_t kCount = 64 << 10;  // 256 KiB of float32, in cache
  std::vector<float> a(kCount, 1.0f), b(kCount, 2.0f);
  std::vector<double> t;
  for (int i = 0; i < 8; ++i) {
    const auto t0 = Clock::now();
    comm.reducer().reduce(reinterpret_cast<std::byte*>(a.data()), reinterpret_cast<const std::byte*>(a.data()),
                          reinterpret_cast<const std::byte*>(b.data()), kCount, DataType::kFloat32, ReduceOp::kSum, 1.0);
    t.push_back(seconds(t0, Clock::now()));
  }
  return median(t) / (kCount * sizeof(float));
}

}  // namespace

double calibrationBudget(std::chrono::milliseconds timeout) {
  return std::min(1.0, 0.1 * std::chrono::duration<double>(timeout).count());
}

LinkCost measureLink(LinkProbe& probe, double budget) {
  constexpr int kSmall = 16, kLarge = 3, kBurst = 32;
  constexpr size_t kFirstLarge = size_t{16} << 10;
  const double start = probe.now(), end = start + budget;
  auto timed = [&probe](size_t bytes) {
    const double t0 = probe.now();
    probe.roundTrip(bytes);
    return probe.now() - t0;
  };
  timed(8);  // warm-up
  // Small round trips in 30% of the budget; three at least, for a median, within half of it.
  std::vector<double> rtt;
  auto fits = [&](double share) { return probe.now() + rtt.back() <= start + share * budget; };
  do {
    rtt.push_back(timed(8));
  } while (static_cast<int>(rtt.size()) < kSmall && (fits(0.3) || (rtt.size() < 3 && fits(0.5))));
  LinkCost link;
  link.alpha = median(rtt) / 2;
  // Large messages, leaving room for the burst (about one round trip, twice over).
  const double largeEnd = end - 4 * link.alpha;
  size_t size = kFirstLarge;
  rtt.clear();
  for (;;) {
    rtt.push_back(timed(size));
    const double took = median(rtt), left = largeEnd - probe.now();
    if (size < kLargestBytes) {
      const double next = 2 * link.alpha + std::max(0.0, took - 2 * link.alpha) * 4;
      if (kLarge * next <= left) {
        size *= 4;
        rtt.clear();
        continue;
      }
    }
    if (static_cast<int>(rtt.size()) >= kLarge || took > left) break;
  }
  link.beta = std::max(0.0, median(rtt) / 2 - link.alpha) / static_cast<double>(size);
  const double t0 = probe.now();
  probe.burst(kBurst);
  link.overhead = std::max(0.0, probe.now() - t0 - 2 * link.alpha) / kBurst;
  RF_LOG(kDebug) << "calibration of a link: " << probe.now() - start << " s of a budget of " << budget
                 << " s, largest message " << size << " bytes";
  return link;
}

ModelConstants calibrate(Communicator& comm) {
  ModelConstants m;
  if (comm.size() < 2) return m;
  const std::vector<int>& hostOf = comm.hostOf();
  int local = -1, remote = -1;
  for (int r = 1; r < comm.size(); ++r) {
    const bool same = !hostOf.empty() ? hostOf[r] == hostOf[0] : true;
    if (same && local < 0) local = r;
    if (!same && remote < 0) remote = r;
  }
  const std::string file = params::kModelFile.str();
  double packed[7] = {};
  std::exception_ptr failure;  // rank 0's: every rank throws, not only rank 0
  if (comm.rank() == 0) {
    try {
      if (!file.empty()) {
        const Word skip(kCmdDone, 0);
        for (int partner : {local, remote}) {
          if (partner > 0) send(comm, skip.bytes, 8, DataType::kUint8, partner);
        }
        std::ifstream in(file);
        if (!in) RF_THROW(InvalidArgument, params::kModelFile.name, "='", file, "' cannot be read");
        std::stringstream text;
        text << in.rdbuf();
        m = ModelConstants::parse(text.str(), std::string(params::kModelFile.name) + "='" + file + "'");
      } else {
        // The budget: half for the local link when there is a remote one too (a local link
        // takes far less), the rest for the remote one.
        const double budget = calibrationBudget(comm.timeout());
        const Clock::time_point start = Clock::now();
        if (local > 0) {
          CommProbe probe(comm, local);
          m.local = measureLink(probe, remote > 0 ? budget / 2 : budget);
          probe.done();
        }
        if (remote > 0) {
          CommProbe probe(comm, remote);
          m.remote = measureLink(probe, std::max(0.0, budget - seconds(start, Clock::now())));
          probe.done();
        }
        if (local < 0) m.local = m.remote;
        if (remote < 0) m.remote = m.local;
        m.gamma = measureGamma(comm);
      }
      const std::string save = params::kModelSave.str();
      if (!save.empty()) {
        std::ofstream out(save);
        out << m.text() << "\n";
        if (!out) RF_THROW(InvalidArgument, params::kModelSave.name, "='", save, "' cannot be written");
      }
      packed[0] = m.local.alpha, packed[1] = m.local.beta, packed[2] = m.local.overhead;
      packed[3] = m.remote.alpha, packed[4] = m.remote.beta, packed[5] = m.remote.overhead, packed[6] = m.gamma;
    } catch (const InvalidArgument&) {
      if (comm.failed()) throw;
      failure = std::current_exception();
      packed[0] = -1;  // tells the other ranks
    }
  } else if (comm.rank() == local || comm.rank() == remote) {
    answer(comm);
  }
  broadcast(comm, {.sendbuf = packed, .recvbuf = packed, .count = 7, .dtype = DataType::kFloat64, .root = 0});
  if (failure) std::rethrow_exception(failure);
  if (packed[0] < 0) {
    RF_THROW(InvalidArgument, "rank 0 could not load the allreduce model (", params::kModelFile.name, " or ",
             params::kModelSave.name, "; rank 0's error says which)");
  }
  m.local = LinkCost{packed[0], packed[1], packed[2]};
  m.remote = LinkCost{packed[3], packed[4], packed[5]};
  m.gamma = packed[6];
  RF_LOG(kDebug) << "allreduce model: " << m.text();
  return m;
}

}  // namespace ringfold::coll
