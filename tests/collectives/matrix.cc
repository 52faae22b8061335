#include "matrix.h"

#include <memory>
#include <string>

#include "reference.h"
#include "reduce/cpu_reducer.h"

namespace ringfold::rftest {

namespace {

using testref::Bytes;

const char* algoName(AllreduceAlgorithm a) { return algorithmName(a); }

testref::RefAlgo refOf(AllreduceAlgorithm a) {
  return a == AllreduceAlgorithm::kDirect ? testref::RefAlgo::kDirect
                                          : a == AllreduceAlgorithm::kTree ? testref::RefAlgo::kTree : testref::RefAlgo::kRing;
}

// Notes every rank's exception.
void noteErrors(const std::vector<std::exception_ptr>& errors, const std::string& what, FailureLog& log) {
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r]) log.note(what, " rank ", r, " threw: ", describe(errors[r]));
  }
}

// Compares `got` with `want`, and with `first` (the previous run) when given.
void compare(const std::byte* got, const std::byte* want, size_t count, size_t es, const std::string& what,
             FailureLog& log) {
  long long i = firstDifference(got, want, count, es);
  if (i >= 0) log.note(what, ": element ", i, " of ", count, " differs from the reference");
}

}  // namespace

std::vector<ReduceCase> reduceCases(const std::vector<ReduceOp>& ops, const std::vector<size_t>& counts) {
  std::vector<ReduceCase> out;
  for (ReduceOp op : ops) {
    for (size_t c : counts) out.push_back(ReduceCase{op, c, 1.0, 1.0});
  }
  return out;
}

void checkAllreduce(int n, DataType t, const std::vector<ReduceCase>& cases,
                    const std::vector<AllreduceAlgorithm>& algorithms, const GroupOptions& group, FailureLog& log) {
  auto red = makeCpuReducer();
  const size_t es = dataTypeSize(t);
  // References by algorithm: [ring, direct, tree] flat, then hierarchical with each of them
  // among hosts (when the group has hosts of 2 ranks or more, 2 hosts or more).
  const int local = group.ranksPerHost;
  const bool hosts = local >= 2 && n % local == 0 && n / local >= 2;
  struct Prepared {
    std::vector<Bytes> inputs;
    Bytes flat[3], hier[3];
  };
  std::vector<Prepared> prep(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    for (int r = 0; r < n; ++r) {
      prep[i].inputs.push_back(testref::makeInput(t, c.count, r, 11 + i, c.op == ReduceOp::kProd));
    }
    for (int a = 0; a < 3; ++a) {
      const auto algo = static_cast<testref::RefAlgo>(a);
      prep[i].flat[a] = testref::referenceAllreduce(*red, prep[i].inputs, c.count, t, c.op, c.preScale, c.postScale,
                                                    algo, group.ringChunkBytes);
      if (hosts) {
        prep[i].hier[a] = testref::referenceHierarchical(*red, prep[i].inputs, c.count, t, c.op, c.preScale,
                                                         c.postScale, local, algo, group.ringChunkBytes);
      }
    }
  }
  auto errors = runRanks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      const Bytes& input = prep[i].inputs[r];
      const size_t bytes = c.count * es;
      for (AllreduceAlgorithm algo : algorithms) {
        const coll::AllreduceChoice used = resolveAllreduce(comm, algo, bytes);
        const bool hier = used.algorithm == AllreduceAlgorithm::kHierarchical && n > 1;
        if (hier && !hosts) log.note("allreduce chose hierarchical without hosts");
        if (used.ringChunkBytes != group.ringChunkBytes) {
          log.note("the model chose ring chunks of ", used.ringChunkBytes, " bytes, the reference assumes ",
                   group.ringChunkBytes);
        }
        const Bytes& want = hier ? prep[i].hier[static_cast<int>(refOf(used.cross))]
                                 : prep[i].flat[static_cast<int>(refOf(used.algorithm))];
        for (bool inPlace : {false, true}) {
          Bytes first;
          for (int run = 0; run < 2; ++run) {
            const std::string what = detail::concat("allreduce ranks=", n, " dtype=", dataTypeName(t), " op=",
                                                    reduceOpName(c.op), " count=", c.count, " pre=", c.preScale,
                                                    " post=", c.postScale, " algo=", algoName(algo), "(", algoName(used.algorithm),
                                                    hier ? std::string("/") + algoName(used.cross) : std::string(),
                                                    ") inplace=",
                                                    inPlace, " run=", run, " rank=", r);
            GuardedBuffer send(bytes), recv(bytes);
            send.fill(input);
            recv.poison();
            if (inPlace) recv.fill(input);
            AllreduceOptions o;
            o.sendbuf = inPlace ? recv.data() : send.data();
            o.recvbuf = recv.data();
            o.count = c.count;
            o.dtype = t;
            o.op = c.op;
            o.preScale = c.preScale;
            o.postScale = c.postScale;
            o.algorithm = algo;
            allreduce(comm, o);
            if (!send.intact() || !recv.intact()) log.note(what, ": wrote outside its buffers");
            if (!inPlace && firstDifference(send.data(), input.data(), c.count, es) >= 0) {
              log.note(what, ": modified sendbuf");
            }
            compare(recv.data(), want.data(), c.count, es, what, log);
            if (run == 0) {
              first.assign(recv.data(), recv.data() + bytes);
            } else if (firstDifference(recv.data(), first.data(), c.count, es) >= 0) {
              log.note(what, ": second run differs from the first");
            }
          }
        }
      }
    }
  }, group);
  noteErrors(errors, detail::concat("allreduce ranks=", n, " dtype=", dataTypeName(t)), log);
}

void checkReduceScatter(int n, DataType t, const std::vector<ReduceCase>& cases, const GroupOptions& group,
                        FailureLog& log) {
  auto red = makeCpuReducer();
  const size_t es = dataTypeSize(t);
  struct Prepared {
    std::vector<Bytes> inputs;
    std::vector<Bytes> blocks;  // per rank
  };
  std::vector<Prepared> prep(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    for (int r = 0; r < n; ++r) {
      prep[i].inputs.push_back(testref::makeInput(t, c.count * n, r, 101 + i, c.op == ReduceOp::kProd));
    }
    for (int r = 0; r < n; ++r) {
      prep[i].blocks.push_back(
          testref::referenceReduceScatter(*red, prep[i].inputs, c.count, t, c.op, c.preScale, c.postScale, r));
    }
  }
  auto errors = runRanks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      const Bytes& input = prep[i].inputs[r];
      const size_t blockBytes = c.count * es;
      for (bool inPlace : {false, true}) {
        for (int run = 0; run < 2; ++run) {
          const std::string what = detail::concat("reduce_scatter ranks=", n, " dtype=", dataTypeName(t), " op=",
                                                  reduceOpName(c.op), " recvCount=", c.count, " pre=", c.preScale,
                                                  " post=", c.postScale, " inplace=", inPlace, " run=", run,
                                                  " rank=", r);
          GuardedBuffer send(blockBytes * n), recv(blockBytes);
          send.fill(input);
          recv.poison();
          ReduceScatterOptions o;
          o.sendbuf = send.data();
          o.recvbuf = inPlace ? send.data() + r * blockBytes : recv.data();
          o.recvCount = c.count;
          o.dtype = t;
          o.op = c.op;
          o.preScale = c.preScale;
          o.postScale = c.postScale;
          reduceScatter(comm, o);
          if (!send.intact() || !recv.intact()) log.note(what, ": wrote outside its buffers");
          const std::byte* got = static_cast<const std::byte*>(o.recvbuf);
          compare(got, prep[i].blocks[r].data(), c.count, es, what, log);
          // The other blocks of sendbuf are the caller's and stay as they were.
          for (int b = 0; b < n; ++b) {
            if (inPlace && b == r) continue;
            if (firstDifference(send.data() + b * blockBytes, input.data() + b * blockBytes, c.count, es) >= 0) {
              log.note(what, ": modified block ", b, " of sendbuf");
            }
          }
        }
      }
    }
  }, group);
  noteErrors(errors, detail::concat("reduce_scatter ranks=", n, " dtype=", dataTypeName(t)), log);
}

namespace {

// allgatherv with the given per-rank counts (allgather when `equal`).
void gatherCase(Communicator& comm, DataType t, const std::vector<size_t>& counts, bool equal, uint64_t seed,
                const std::string& label, FailureLog& log) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = dataTypeSize(t);
  std::vector<size_t> offsets(n + 1, 0);
  for (int i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + counts[i];
  Bytes want(offsets[n] * es);
  for (int i = 0; i < n; ++i) {
    Bytes block = testref::makeInput(t, counts[i], i, seed);
    if (!block.empty()) std::memcpy(want.data() + offsets[i] * es, block.data(), block.size());
  }
  const Bytes own = testref::makeInput(t, counts[r], r, seed);
  for (bool inPlace : {false, true}) {
    for (int run = 0; run < 2; ++run) {
      const std::string what = detail::concat(label, " inplace=", inPlace, " run=", run, " rank=", r);
      GuardedBuffer send(own.size()), recv(want.size());
      send.fill(own);
      recv.poison();
      std::byte* mine = recv.data() + offsets[r] * es;
      if (inPlace && !own.empty()) std::memcpy(mine, own.data(), own.size());
      const void* sendbuf = inPlace ? static_cast<const void*>(mine) : send.data();
      if (equal) {
        AllgatherOptions o;
        o.sendbuf = sendbuf;
        o.recvbuf = recv.data();
        o.sendCount = counts[0];
        o.dtype = t;
        allgather(comm, o);
      } else {
        AllgathervOptions o;
        o.sendbuf = sendbuf;
        o.recvbuf = recv.data();
        o.recvCounts = counts;
        o.dtype = t;
        allgatherv(comm, o);
      }
      if (!send.intact() || !recv.intact()) log.note(what, ": wrote outside its buffers");
      compare(recv.data(), want.data(), offsets[n], es, what, log);
    }
  }
}

}  // namespace

void checkAllgather(int n, DataType t, const std::vector<size_t>& counts, const GroupOptions& group, FailureLog& log) {
  auto errors = runRanks(n, [&](Communicator& comm) {
    for (size_t i = 0; i < counts.size(); ++i) {
      gatherCase(comm, t, std::vector<size_t>(n, counts[i]), true, 201 + i,
                 detail::concat("allgather ranks=", n, " dtype=", dataTypeName(t), " count=", counts[i]), log);
    }
  }, group);
  noteErrors(errors, detail::concat("allgather ranks=", n, " dtype=", dataTypeName(t)), log);
}

void checkAllgatherv(int n, DataType t, const std::vector<size_t>& baseCounts, const GroupOptions& group,
                     FailureLog& log) {
  auto errors = runRanks(n, [&](Communicator& comm) {
    for (size_t i = 0; i < baseCounts.size(); ++i) {
      std::vector<size_t> counts(n);
      for (int r = 0; r < n; ++r) counts[r] = r % 3 == 1 ? 0 : baseCounts[i] + static_cast<size_t>(r) * 3;
      gatherCase(comm, t, counts, false, 301 + i,
                 detail::concat("allgatherv ranks=", n, " dtype=", dataTypeName(t), " base=", baseCounts[i]), log);
    }
  }, group);
  noteErrors(errors, detail::concat("allgatherv ranks=", n, " dtype=", dataTypeName(t)), log);
}

void checkBroadcast(int n, DataType t, const std::vector<size_t>& counts, const GroupOptions& group, FailureLog& log) {
  const size_t es = dataTypeSize(t);
  auto errors = runRanks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t i = 0; i < counts.size(); ++i) {
      for (int root : {0, n - 1, n / 2}) {
        const Bytes want = testref::makeInput(t, counts[i], root, 401 + i);
        for (bool inPlace : {false, true}) {
          for (int run = 0; run < 2; ++run) {
            const std::string what = detail::concat("broadcast ranks=", n, " dtype=", dataTypeName(t), " count=",
                                                    counts[i], " root=", root, " inplace=", inPlace, " run=", run,
                                                    " rank=", r);
            GuardedBuffer send(want.size()), recv(want.size());
            recv.poison();
            if (r == root) {
              send.fill(want);
              if (inPlace) recv.fill(want);
            }
            BroadcastOptions o;
            o.sendbuf = r != root ? nullptr : inPlace ? recv.data() : send.data();
            o.recvbuf = recv.data();
            o.count = counts[i];
            o.dtype = t;
            o.root = root;
            broadcast(comm, o);
            if (!send.intact() || !recv.intact()) log.note(what, ": wrote outside its buffers");
            compare(recv.data(), want.data(), counts[i], es, what, log);
          }
        }
      }
    }
  }, group);
  noteErrors(errors, detail::concat("broadcast ranks=", n, " dtype=", dataTypeName(t)), log);
}

void checkAlltoall(int n, DataType t, const std::vector<size_t>& baseCounts, const GroupOptions& group,
                   FailureLog& log) {
  const size_t es = dataTypeSize(t);
  auto errors = runRanks(n, [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t i = 0; i < baseCounts.size(); ++i) {
      const size_t base = baseCounts[i];
      for (bool symmetric : {true, false}) {
        // counts[src][dst]
        auto countOf = [&](int src, int dst) -> size_t {
          if (symmetric) return base + static_cast<size_t>((src + dst) % 3);
          return (src + 2 * dst) % 4 == 1 ? 0 : base + static_cast<size_t>(src * 2 + dst);
        };
        std::vector<size_t> sendCounts(n), recvCounts(n), sendOff(n + 1, 0), recvOff(n + 1, 0);
        for (int p = 0; p < n; ++p) {
          sendCounts[p] = countOf(r, p);
          recvCounts[p] = countOf(p, r);
          sendOff[p + 1] = sendOff[p] + sendCounts[p];
          recvOff[p + 1] = recvOff[p] + recvCounts[p];
        }
        const std::string label = detail::concat("alltoall ranks=", n, " dtype=", dataTypeName(t), " base=", base,
                                                 " symmetric=", symmetric);
        if (alltoallExchangeCounts(comm, sendCounts) != recvCounts) {
          log.note(label, " rank=", r, ": alltoallExchangeCounts returned wrong counts");
        }
        const uint64_t seed = 501 + i * 2 + (symmetric ? 1 : 0);
        Bytes input(sendOff[n] * es), want(recvOff[n] * es);
        for (int p = 0; p < n; ++p) {
          Bytes out = testref::makeInput(t, sendCounts[p], r * 64 + p, seed);
          Bytes in = testref::makeInput(t, recvCounts[p], p * 64 + r, seed);
          if (!out.empty()) std::memcpy(input.data() + sendOff[p] * es, out.data(), out.size());
          if (!in.empty()) std::memcpy(want.data() + recvOff[p] * es, in.data(), in.size());
        }
        for (bool inPlace : {false, true}) {
          if (inPlace && !symmetric) continue;
          for (int run = 0; run < 2; ++run) {
            const std::string what = detail::concat(label, " inplace=", inPlace, " run=", run, " rank=", r);
            GuardedBuffer send(input.size()), recv(want.size());
            send.fill(input);
            recv.poison();
            if (inPlace) recv.fill(input);
            AlltoallOptions o;
            o.sendbuf = inPlace ? recv.data() : send.data();
            o.recvbuf = recv.data();
            o.sendCounts = sendCounts;
            o.recvCounts = recvCounts;
            o.dtype = t;
            alltoall(comm, o);
            if (!send.intact() || !recv.intact()) log.note(what, ": wrote outside its buffers");
            compare(recv.data(), want.data(), recvOff[n], es, what, log);
          }
        }
      }
    }
  }, group);
  noteErrors(errors, detail::concat("alltoall ranks=", n, " dtype=", dataTypeName(t)), log);
}

}  // namespace ringfold::rftest
