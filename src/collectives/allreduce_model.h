// AllreduceModel: the latency/bandwidth/reduce-cost model that picks an allreduce algorithm and
// its tree segment for a message size on a job's shape, and the set of algorithms RINGFOLD_ALGO
// allows (NCCL_ALGO's syntax).
//
// Constants (seconds, seconds per byte), per link class: `local` joins ranks of one host (shared
// memory or Unix sockets), `remote` joins hosts (TCP or RDMA).
//   alpha    : one small message's one-way latency (half a ping-pong's round trip);
//   beta     : per byte of a large message (from a 1 MiB ping-pong, alpha taken off);
//   overhead : per message when messages stream back to back (a burst of small messages);
//   gamma    : per byte reduced once by the CPU reducer (float32 sum).
// They are measured at start-up (calibrate(), about 50 ms: rank 0 pings its first local and its
// first remote peer, times its reducer, and broadcasts the figures so every rank chooses the
// same; bounded in time, calibrationBudget(), as the other ranks wait for it in silence), or read
// from RINGFOLD_MODEL_FILE (the `text()` format, saved with RINGFOLD_MODEL_SAVE).
//
// Predicted seconds for S bytes at n ranks on H hosts of L ranks each (consecutive ranks on a
// host); d = ceil(log2 n); alpha, beta, overhead are the remote link's when H > 1, except where
// a hop stays on a host (local alpha):
//   ring   : R 2(n-1) a + 2 (n-1)/n S beta + (n-1)/n S gamma, a = H/n alpha_r + (1-H/n) alpha_l
//            (H of the ring's n edges cross hosts), in R rounds of n chunks of c bytes: c is
//            RINGFOLD_RING_CHUNK_BYTES, and across hosts it is raised (in powers of two, up to
//            64 MiB) until a round's start-up is at most 10% of its transfer (alpha <= 0.1 c
//            beta): rounds keep a chunk in cache on one host, on slow links they cost latency
//   direct : alpha + (n-1) overhead + max(L (n-L) S beta_r, (L-1) S beta_l) + (n-1) S gamma
//            (one hop; a host's link carries its L ranks' copies)
//   tree   : 2 d (a + s beta) + 2 S beta (L+1)/2 + S gamma + 3 (S/s) overhead, a the alpha of
//            a hop with the ceil(log2 L) lowest levels on one host, s the segment (a power of two
//            from 64 KiB to RINGFOLD_SEGMENT_BYTES, or S/2) with the least predicted time; each
//            rank sends and receives 2S in all, and a host's link carries about (L+1)/2 ranks'
//   hierarchical (H > 1, L > 1, every host L ranks): a local ring reduce-scatter and allgather,
//            2 (L-1) (alpha_l + S/L beta_l) + (L-1)/L S gamma, plus the best allowed flat
//            algorithm among the H hosts on S/L bytes, whose link is shared by the L concurrent
//            cross allreduces (beta_r x L). RINGFOLD_ALGO=hierarchical,tree: tree among hosts.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/allreduce_plan.h"

namespace ringfold {
class Communicator;
}

namespace ringfold::coll {

struct LinkCost {
  double alpha = 15e-6;
  double beta = 0.1e-9;
  double overhead = 2e-6;
};

struct ModelConstants {
  LinkCost local;
  LinkCost remote;
  double gamma = 0.15e-9;
  // "local_alpha=1.5e-05 local_beta=1e-10 ... gamma=1.5e-10" (one line, the file's format).
  std::string text() const;
  // Parses text(); throws InvalidArgument naming `origin` and the bad or missing key.
  static ModelConstants parse(const std::string& text, const std::string& origin);
};

// The job as the model sees it.
struct JobShape {
  int size = 1;
  int hosts = 1;
  int localSize = 1;          // ranks per host when homogeneous
  bool homogeneous = true;    // every host runs localSize ranks
};

// Algorithms RINGFOLD_ALGO allows: "auto" (every algorithm: ring, direct, tree and, where the
// job fits it, hierarchical), a comma-separated list ("ring,tree", "hierarchical,tree"), or a
// list to exclude from auto's after "^" ("^tree"); case-insensitive, as NCCL_ALGO. A leading
// "allreduce:" is accepted. Throws InvalidArgument naming the variable and the unknown name.
class AlgorithmSet {
 public:
  static AlgorithmSet all();       // every algorithm
  static AlgorithmSet automatic();  // auto's: all of them
  static AlgorithmSet parse(const std::string& spec);
  void add(AllreduceAlgorithm a) { bits_ |= 1u << static_cast<int>(a); }
  bool has(AllreduceAlgorithm a) const { return (bits_ >> static_cast<int>(a)) & 1u; }
  void remove(AllreduceAlgorithm a) { bits_ &= ~(1u << static_cast<int>(a)); }
  bool single() const { return bits_ != 0 && (bits_ & (bits_ - 1)) == 0; }
  std::string text() const;  // "ring,tree"

 private:
  uint32_t bits_ = 0;
};

// The settings the model starts from (the communicator's).
struct Knobs {
  size_t segmentBytes = 512 << 10;    // RINGFOLD_SEGMENT_BYTES: the largest tree segment
  size_t ringChunkBytes = 256 << 10;  // RINGFOLD_RING_CHUNK_BYTES: the smallest ring chunk (0: one round)
};

struct AllreduceChoice {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  AllreduceAlgorithm cross = AllreduceAlgorithm::kRing;  // hierarchical: among hosts
  size_t treeSegmentBytes = 512 << 10;                   // tree (and a tree among hosts)
  size_t ringChunkBytes = 256 << 10;                     // ring (and a ring among hosts)
  double seconds = 0;                                    // predicted
};

// Predicted time of one algorithm (kHierarchical: with its best algorithm among hosts, from the
// flat ones in `allowed`, or from all of them when it holds none), or a negative number when it
// does not apply to the shape (hierarchical on one host, one rank per host, or uneven hosts).
AllreduceChoice predictAllreduce(const ModelConstants& m, const JobShape& shape, size_t bytes, AllreduceAlgorithm a,
                                 const Knobs& knobs, AlgorithmSet allowed = AlgorithmSet::all());

// The allowed algorithm with the least predicted time (ties: ring, direct, tree, hierarchical);
// the ring when none of them applies to the shape.
AllreduceChoice chooseAllreduce(const ModelConstants& m, const JobShape& shape, size_t bytes, AlgorithmSet allowed,
                                const Knobs& knobs);

// The choices of one communicator, computed once per message size (and logged at debug level
// then). Forced choices come first: RINGFOLD_DIRECT_MAX_BYTES sends messages up to it direct
// (and none above it), RINGFOLD_HIERARCHICAL_ALLREDUCE=1 makes hierarchical the choice wherever
// it applies and =0 rules it out; the model picks among what is left.
class AllreduceChooser {
 public:
  struct Rules {
    AlgorithmSet allowed = AlgorithmSet::automatic();
    std::optional<uint64_t> directMaxBytes;
    std::optional<bool> hierarchical;
    Knobs knobs;
  };
  AllreduceChooser(const ModelConstants& model, const JobShape& shape, const Rules& rules);
  const AllreduceChoice& choose(size_t bytes);
  const JobShape& shape() const { return shape_; }

 private:
  AllreduceChoice compute(size_t bytes) const;
  ModelConstants model_;
  JobShape shape_;
  Rules rules_;
  std::unordered_map<size_t, AllreduceChoice> memo_;
};

// The shape of a job whose ranks run on hostOf[rank] (empty: one host).
JobShape jobShape(int size, const std::vector<int>& hostOf);

// One link's measurement as rank 0 drives it, step by step, while the partner answers each step
// (calibrate() runs it over the communicator; a test over a simulated link). now(): seconds on a
// monotonic clock, the one the budget is kept on.
class LinkProbe {
 public:
  virtual ~LinkProbe() = default;
  virtual double now() = 0;
  virtual void roundTrip(size_t bytes) = 0;  // `bytes` to the partner, the same back
  virtual void burst(int messages) = 0;      // `messages` small ones back to back, one back
};

// How long calibrate() may measure, in seconds: a tenth of the communicator's timeout, at most
// 1 s. Every rank but the two measured waits for it in the broadcast that follows, hearing
// nothing, under that timeout; on a LAN the full measurement takes far less.
double calibrationBudget(std::chrono::milliseconds timeout);

// Measures one link within `budget` seconds. In order: a warm-up round trip; up to 16 small round
// trips (alpha: half their lower median) while another fits in 30% of the budget (the first three
// in half of it); round trips of 16 KiB, then 64 and 256 KiB, then 1 MiB (beta: from the median at
// the largest size reached, alpha taken off), moving up while three at the next size are
// predicted (the transfer part of the time growing with the size) to fit before the budget's end
// less a burst's room, and up to three at the last size while they fit; a burst of 32 small
// messages (overhead). At least one of each: on a link whose round trip alone is a quarter of the
// budget, four round trips and the 16 KiB transfer are the bound. On a LAN: 16 small, 3 x 1 MiB,
// as before the budget.
LinkCost measureLink(LinkProbe& probe, double budget);

// Measures the constants over `comm` (collective; see above) and returns rank 0's figures on
// every rank. Reads RINGFOLD_MODEL_FILE instead when it is set; writes RINGFOLD_MODEL_SAVE on
// rank 0 when that is set.
ModelConstants calibrate(Communicator& comm);

}  // namespace ringfold::coll
