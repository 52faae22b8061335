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
// same), or read from RINGFOLD_MODEL_FILE (the `text()` format, saved with RINGFOLD_MODEL_SAVE).
//
// Predicted seconds for S bytes at n ranks on H hosts of L ranks each; flat algorithms use the
// remote link when H > 1 (the slowest hop bounds every step), d = ceil(log2 n):
//   ring   : 2(n-1) alpha + 2 (n-1)/n S beta + (n-1)/n S gamma
//   direct : alpha + (n-1) S (beta + gamma)
//   tree   : 2 d (alpha + s beta) + 2 S beta + S gamma + 3 (S/s) overhead, for segments of s
//            bytes (each rank sends and receives 2S in all; the pipeline fills over 2d hops;
//            each segment costs its messages' overhead); s is the candidate (a power of two
//            from 8 KiB to RINGFOLD_SEGMENT_BYTES, or S/2) with the least predicted time
//   hierarchical (H > 1, L > 1, every host L ranks): a local ring reduce-scatter and allgather,
//            2 (L-1) (alpha_l + S/L beta_l) + (L-1)/L S gamma, plus the best allowed flat
//            algorithm among the H hosts on S/L bytes, whose link is shared by the L concurrent
//            cross allreduces (beta_r x L). RINGFOLD_ALGO=hierarchical,tree: tree among hosts.
#pragma once

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

// Algorithms RINGFOLD_ALGO allows: "auto" (all), a comma-separated list ("ring,tree"), or a
// list to exclude after "^" ("^tree"); case-insensitive, as NCCL_ALGO. A leading "allreduce:"
// is accepted. Throws InvalidArgument naming the variable and the unknown name.
class AlgorithmSet {
 public:
  static AlgorithmSet all();
  static AlgorithmSet parse(const std::string& spec);
  bool has(AllreduceAlgorithm a) const { return (bits_ >> static_cast<int>(a)) & 1u; }
  void remove(AllreduceAlgorithm a) { bits_ &= ~(1u << static_cast<int>(a)); }
  bool single() const { return bits_ != 0 && (bits_ & (bits_ - 1)) == 0; }
  std::string text() const;  // "ring,tree"

 private:
  uint32_t bits_ = 0;
};

struct AllreduceChoice {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  AllreduceAlgorithm cross = AllreduceAlgorithm::kRing;  // hierarchical: among hosts
  size_t treeSegmentBytes = 512 << 10;                   // tree (and a tree among hosts)
  double seconds = 0;                                    // predicted
};

// Predicted time of one algorithm (kHierarchical: with its best algorithm among hosts, from the
// flat ones in `allowed`, or from all of them when it holds none), or a negative number when it
// does not apply to the shape (hierarchical on one host, one rank per host, or uneven hosts).
AllreduceChoice predictAllreduce(const ModelConstants& m, const JobShape& shape, size_t bytes, AllreduceAlgorithm a,
                                 size_t segmentBytes, AlgorithmSet allowed = AlgorithmSet::all());

// The allowed algorithm with the least predicted time (ties: ring, direct, tree, hierarchical);
// the ring when none of them applies to the shape.
AllreduceChoice chooseAllreduce(const ModelConstants& m, const JobShape& shape, size_t bytes, AlgorithmSet allowed,
                                size_t segmentBytes);

// The choices of one communicator, computed once per message size (and logged at debug level
// then). Forced choices come first: RINGFOLD_DIRECT_MAX_BYTES sends messages up to it direct
// (and none above it), RINGFOLD_HIERARCHICAL_ALLREDUCE=1 makes hierarchical the choice wherever
// it applies and =0 rules it out; the model picks among what is left.
class AllreduceChooser {
 public:
  struct Rules {
    AlgorithmSet allowed = AlgorithmSet::all();
    std::optional<uint64_t> directMaxBytes;
    std::optional<bool> hierarchical;
    size_t segmentBytes = 512 << 10;
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

// Measures the constants over `comm` (collective; see above) and returns rank 0's figures on
// every rank. Reads RINGFOLD_MODEL_FILE instead when it is set; writes RINGFOLD_MODEL_SAVE on
// rank 0 when that is set.
ModelConstants calibrate(Communicator& comm);

}  // namespace ringfold::coll
