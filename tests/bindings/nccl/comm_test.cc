// The NCCL-API library's communicators and errors, in forked host-memory jobs: split and
// shrink, non-blocking init, ncclCommInitAll with one thread driving every rank, abort of a
// collective stuck in another thread, the async error after a peer is killed, the version,
// error strings and every ncclInvalidArgument / ncclInvalidUsage path (the communicator stays
// usable after each).
#include <gtest/gtest.h>
#include <nccl.h>
#include <nccl_device/core.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/secret.h"
#include "rendezvous/tcp_store.h"
#include "tests/bindings/nccl/job.h"

namespace {

using namespace ncclt;
using namespace std::chrono_literals;

bool contains(const char* text, const char* part) { return text && std::strstr(text, part) != nullptr; }

ncclResult_t allreduceSum(ncclComm_t comm, int value, int& out) {
  int v = value;
  const ncclResult_t r = ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, comm, nullptr);
  return r;
}

// ncclCommSplit by color rank % 2 with keys that reverse the order, a rank with
// NCCL_SPLIT_NOCOLOR, a non-blocking split, then ncclCommShrink without the last rank.
int split(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  NCCLOK(ncclCommInitRank(&comm, n, id, rank));
  ncclComm_t sub = nullptr;
  NCCLOK(ncclCommSplit(comm, rank % 2, -rank, &sub, nullptr));
  CHECK(sub != nullptr, "split gave no communicator");
  int count = 0, subRank = -1;
  NCCLOK(ncclCommCount(sub, &count));
  NCCLOK(ncclCommUserRank(sub, &subRank));
  std::vector<int> mine;
  for (int r = 0; r < n; ++r) {
    if (r % 2 == rank % 2) mine.push_back(r);
  }
  CHECK(count == int(mine.size()), "split size %d", count);
  // Keys -rank: the highest parent rank comes first.
  const int expectRank = int(mine.size()) - 1 - int(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  CHECK(subRank == expectRank, "split rank %d, expected %d", subRank, expectRank);
  int sum = -1;
  NCCLOK(allreduceSum(sub, rank, sum));
  int want = 0;
  for (int r : mine) want += r;
  CHECK(sum == want, "allreduce in the split: %d != %d", sum, want);
  NCCLOK(ncclCommDestroy(sub));

  // Rank 0 opts out; a non-blocking split for the others.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t rest = nullptr;
  const ncclResult_t res = ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 7, rank, &rest, &config);
  if (rank == 0) {
    CHECK(res == ncclSuccess && rest == nullptr, "NOCOLOR: %d %p", int(res), static_cast<void*>(rest));
  } else {
    CHECK(res == ncclInProgress || res == ncclSuccess, "non-blocking split returned %d", int(res));
    ncclResult_t state = ncclInProgress;
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (state == ncclInProgress && std::chrono::steady_clock::now() < end) {
      NCCLOK(ncclCommGetAsyncError(rest, &state));
      std::this_thread::sleep_for(1ms);
    }
    CHECK(state == ncclSuccess, "non-blocking split ended with %d", int(state));
    NCCLOK(allreduceSum(rest, 1, sum));
    CHECK(sum == n - 1, "allreduce in the non-blocking split: %d", sum);
    NCCLOK(ncclCommDestroy(rest));
  }

  // Shrink: every rank but the last goes on.
  if (rank != n - 1) {
    int excluded = n - 1;
    ncclComm_t smaller = nullptr;
    NCCLOK(ncclCommShrink(comm, &excluded, 1, &smaller, nullptr, NCCL_SHRINK_DEFAULT));
    NCCLOK(ncclCommCount(smaller, &count));
    CHECK(count == n - 1, "shrunk size %d", count);
    NCCLOK(allreduceSum(smaller, 1, sum));
    CHECK(sum == n - 1, "allreduce after shrink: %d", sum);
    NCCLOK(ncclCommDestroy(smaller));
  }
  NCCLOK(ncclCommDestroy(comm));
  return 0;
}

TEST(NcclApiComm, SplitNoColorNonBlockingSplitAndShrinkAt3Ranks) {
  EXPECT_TRUE(runJob(3, split, 60s).ok());
}

TEST(NcclApiComm, SplitAt5Ranks) {
  const JobResult r = runJob(5, split, 60s);
  EXPECT_TRUE(r.ok()) << r.describe();
}

// The store keys under `prefix` of the store `id` names (bindings/nccl/state.cc lays the id out:
// magic, port u32 LE at 8, 32 secret bytes at 12, host text at 44). Counted by deleting them.
int64_t storeKeysUnder(const ncclUniqueId& id, const std::string& prefix) {
  uint32_t port = 0;
  for (int b = 0; b < 4; ++b) port |= uint32_t(static_cast<unsigned char>(id.internal[8 + b])) << (8 * b);
  const std::string secret = ringfold::rendezvous::toHex(reinterpret_cast<const uint8_t*>(id.internal + 12), 32);
  ringfold::rendezvous::TcpStore store(id.internal + 44, static_cast<int>(port), secret, 10s);
  return store.deletePrefix(prefix);
}

// Splits (with a color per rank, with NCCL_SPLIT_NOCOLOR, non-blocking) leave nothing in the
// store once they have returned: the (color, key) entries and the new communicators' own keys.
int splitsCleanUp(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  NCCLOK(ncclCommInitRank(&comm, n, id, rank));
  for (int round = 0; round < 4; ++round) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = round == 3 ? 0 : 1;
    const int color = round == 1 && rank == 0 ? NCCL_SPLIT_NOCOLOR : (rank + round) % 2;
    ncclComm_t sub = nullptr;
    const ncclResult_t res = ncclCommSplit(comm, color, rank, &sub, &config);
    CHECK(res == ncclSuccess || (round == 3 && res == ncclInProgress), "split %d returned %d", round, int(res));
    if (sub == nullptr) continue;
    ncclResult_t state = ncclInProgress;
    for (int polls = 0; state == ncclInProgress && polls < 30000; ++polls) {
      NCCLOK(ncclCommGetAsyncError(sub, &state));
      if (state == ncclInProgress) std::this_thread::sleep_for(1ms);
    }
    CHECK(state == ncclSuccess, "split %d ended with %d", round, int(state));
    int sum = 0;
    NCCLOK(allreduceSum(sub, 1, sum));
    NCCLOK(ncclCommDestroy(sub));
  }
  int sum = 0;
  NCCLOK(allreduceSum(comm, 1, sum));  // every rank is past its splits
  if (rank == 0) {
    const int64_t entries = storeKeysUnder(id, "nccl/ncclsplit");
    const int64_t children = storeKeysUnder(id, "nccl/split/");
    CHECK(entries == 0, "%lld (color, key) entries left in the store", static_cast<long long>(entries));
    CHECK(children == 0, "%lld keys of split communicators left in the store", static_cast<long long>(children));
  }
  NCCLOK(allreduceSum(comm, 1, sum));
  NCCLOK(ncclCommDestroy(comm));
  return 0;
}

TEST(NcclApiComm, SplitsLeaveNothingInTheStoreAt3Ranks) {
  const JobResult r = runJob(3, splitsCleanUp, 60s);
  EXPECT_TRUE(r.ok()) << r.describe();
}

// blocking = 0: ncclInProgress, then ncclCommGetAsyncError until ncclSuccess.
int nonBlockingInit(int rank, int n, const ncclUniqueId& id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "nonblocking";
  ncclComm_t comm = nullptr;
  const ncclResult_t res = ncclCommInitRankConfig(&comm, n, id, rank, &config);
  CHECK(res == ncclInProgress, "non-blocking init returned %d", int(res));
  CHECK(comm != nullptr, "no communicator");
  ncclResult_t state = ncclInProgress;
  int polls = 0;
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (state == ncclInProgress && std::chrono::steady_clock::now() < end) {
    NCCLOK(ncclCommGetAsyncError(comm, &state));
    ++polls;
    std::this_thread::sleep_for(1ms);
  }
  CHECK(state == ncclSuccess, "init ended with %d after %d polls", int(state), polls);
  int sum = 0;
  NCCLOK(allreduceSum(comm, rank + 1, sum));
  CHECK(sum == n * (n + 1) / 2, "sum %d", sum);
  NCCLOK(ncclCommFinalize(comm));
  NCCLOK(ncclCommDestroy(comm));
  return 0;
}

TEST(NcclApiComm, NonBlockingInitReportsInProgressThenSuccess) {
  const JobResult r = runJob(3, nonBlockingInit, 60s);
  EXPECT_TRUE(r.ok()) << r.describe();
}

// ncclCommInitRankScalable with two ids (the first serves) and ncclCommInitRank inside a group.
int scalableAndGroupedInit(int rank, int n, const ncclUniqueId& id) {
  ncclUniqueId ids[2] = {id, id};
  ncclComm_t comm = nullptr;
  NCCLOK(ncclCommInitRankScalable(&comm, n, rank, 2, ids, nullptr));
  int sum = 0;
  NCCLOK(allreduceSum(comm, 2, sum));
  CHECK(sum == 2 * n, "scalable: %d", sum);
  // A second communicator from a split, made inside a group (ncclGroupEnd waits for it).
  ncclComm_t second = nullptr;
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclCommSplit(comm, 0, rank, &second, nullptr));
  NCCLOK(ncclGroupEnd());
  NCCLOK(allreduceSum(second, 3, sum));
  CHECK(sum == 3 * n, "split in a group: %d", sum);
  NCCLOK(ncclCommDestroy(second));
  NCCLOK(ncclCommDestroy(comm));
  return 0;
}

TEST(NcclApiComm, InitRankScalableAndSplitInsideAGroup) {
  const JobResult r = runJob(2, scalableAndGroupedInit, 60s);
  EXPECT_TRUE(r.ok()) << r.describe();
}

// One process, three ranks as threads (ncclCommInitAll); one thread drives all three through a
// group, as nccl-tests does with several GPUs per process.
int initAll(int, int, const ncclUniqueId&) {
  ncclComm_t comms[3] = {};
  NCCLOK(ncclCommInitAll(comms, 3, nullptr));
  std::vector<std::vector<float>> bufs(3, std::vector<float>(1000));
  for (int r = 0; r < 3; ++r) std::fill(bufs[r].begin(), bufs[r].end(), float(r + 1));
  NCCLOK(ncclGroupStart());
  for (int r = 0; r < 3; ++r) NCCLOK(ncclAllReduce(bufs[r].data(), bufs[r].data(), 1000, ncclFloat32, ncclSum, comms[r], nullptr));
  NCCLOK(ncclGroupEnd());
  for (int r = 0; r < 3; ++r) CHECK(bufs[r][999] == 6.0f, "comm %d: %g", r, bufs[r][999]);
  int dev = -1;
  NCCLOK(ncclCommCuDevice(comms[2], &dev));
  CHECK(dev == 2, "cuDevice %d", dev);
  for (auto* c : comms) NCCLOK(ncclCommDestroy(c));
  return 0;
}

TEST(NcclApiComm, InitAllDrivenFromOneThreadThroughAGroup) {
  const JobResult r = runJob(1, initAll, 60s);
  EXPECT_TRUE(r.ok()) << r.describe();
}

// Rank 0's allreduce waits for rank 1, which never calls it; ncclCommAbort from another thread
// must end it with an error at once (RINGFOLD_TIMEOUT is 60 s), and rank 1 learns of it.
int abortStuck(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  NCCLOK(ncclCommInitRank(&comm, n, id, rank));
  if (rank == 0) {
    std::atomic<int> result{-1};
    std::atomic<bool> finished{false};
    std::vector<float> buf(1 << 16, 1.0f);
    std::thread stuck([&] {
      result = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
      finished = true;
    });
    std::this_thread::sleep_for(300ms);
    CHECK(!finished.load(), "the allreduce finished without rank 1");
    const auto start = std::chrono::steady_clock::now();
    NCCLOK(ncclCommAbort(comm));
    stuck.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(result.load() != ncclSuccess, "the aborted allreduce returned success");
    CHECK(seconds < 10, "abort took %.1f s", seconds);
    std::this_thread::sleep_for(2500ms);  // stay alive while rank 1 looks
  } else {
    std::this_thread::sleep_for(1500ms);  // rank 0 aborts meanwhile
    // The call rank 0 made. Rank 0's input may all have arrived before its abort, in which
    // case this call completes (as NCCL's may); the next one must then fail.
    std::vector<float> buf(1 << 16, 1.0f);
    ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
    if (r == ncclSuccess) r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
    CHECK(r == ncclRemoteError, "allreduce after the peer's abort returned %d", int(r));
    CHECK(contains(ncclGetLastError(comm), "ncclCommAbort"), "last error: %s", ncclGetLastError(comm));
    ncclResult_t async = ncclSuccess;
    NCCLOK(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclRemoteError, "async error %d", int(async));
    NCCLOK(ncclCommDestroy(comm));
  }
  return 0;
}

TEST(NcclApiComm, AbortUnblocksACollectiveStuckInAnotherThread) {
  const JobResult r = runJob(2, abortStuck, 60s, {{"RINGFOLD_TIMEOUT", "60"}});
  EXPECT_TRUE(r.ok()) << r.describe();
}

// Rank 2 is killed after init; the others' allreduce fails with a remote error within the
// (small) RINGFOLD_TIMEOUT, ncclCommGetAsyncError reports it afterwards, and ncclCommShrink
// gives the survivors a working communicator.
int peerKilled(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  NCCLOK(ncclCommInitRank(&comm, n, id, rank));
  int out = 0;
  NCCLOK(allreduceSum(comm, 1, out));
  CHECK(out == n, "first allreduce %d", out);
  if (rank == n - 1) raise(SIGKILL);
  std::this_thread::sleep_for(200ms);
  std::vector<float> buf(1 << 16, 1.0f);
  const ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
  CHECK(r == ncclRemoteError || r == ncclSystemError, "allreduce with a dead peer returned %d", int(r));
  ncclResult_t async = ncclSuccess;
  NCCLOK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == r, "async error %d, call returned %d", int(async), int(r));
  CHECK(std::strlen(ncclGetLastError(comm)) > 0, "no last error");
  std::fprintf(stderr, "rank %d saw: %s\n", rank, ncclGetLastError(comm));
  // Later calls fail at once with the same error.
  CHECK(allreduceSum(comm, 1, out) != ncclSuccess, "a call after the failure succeeded");
  // The survivors go on without the dead rank (ncclCommShrink, as torch's fault tolerance does).
  int dead = n - 1;
  ncclComm_t survivors = nullptr;
  NCCLOK(ncclCommShrink(comm, &dead, 1, &survivors, nullptr, NCCL_SHRINK_ABORT));
  if (survivors) {
    NCCLOK(allreduceSum(survivors, 1, out));
    CHECK(out == n - 1, "allreduce among the survivors: %d", out);
    NCCLOK(ncclCommDestroy(survivors));
  }
  NCCLOK(ncclCommAbort(comm));
  return 0;
}

TEST(NcclApiComm, AsyncErrorAfterAPeerIsKilledThenShrink) {
  const JobResult r = runJob(3, peerKilled, 60s, {{"RINGFOLD_TIMEOUT", "3"}});
  EXPECT_FALSE(r.timedOut) << r.describe();
  EXPECT_EQ(r.status[0], 0) << r.describe();
  EXPECT_EQ(r.status[1], 0) << r.describe();
  EXPECT_EQ(r.status[2], -SIGKILL) << r.describe();
}

// Rank 2 stops (SIGSTOP) without dying: its socket stays open, so only RINGFOLD_TIMEOUT (2 s)
// can end the others' allreduce, which must fail with ncclRemoteError naming the silent rank
// well before the job's deadline. Rank 0 then kills rank 2.
int peerSilent(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  NCCLOK(ncclCommInitRank(&comm, n, id, rank));
  std::vector<int64_t> pids(n, 0);
  int64_t me = getpid();
  NCCLOK(ncclAllGather(&me, pids.data(), 1, ncclInt64, comm, nullptr));
  if (rank == n - 1) raise(SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> buf(1 << 12, 1.0f);
  const ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r == ncclRemoteError, "allreduce with a silent peer returned %d", int(r));
  CHECK(seconds < 20, "the silent peer was noticed after %.1f s", seconds);
  std::fprintf(stderr, "rank %d after %.1f s: %s\n", rank, seconds, ncclGetLastError(comm));
  ncclResult_t async = ncclSuccess;
  NCCLOK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclRemoteError, "async error %d", int(async));
  if (rank == 0) kill(static_cast<pid_t>(pids[n - 1]), SIGKILL);
  NCCLOK(ncclCommAbort(comm));
  return 0;
}

TEST(NcclApiComm, RemoteErrorWithinTheTimeoutWhenAPeerFallsSilent) {
  const JobResult r = runJob(3, peerSilent, 60s, {{"RINGFOLD_TIMEOUT", "2"}});
  EXPECT_FALSE(r.timedOut) << r.describe();
  EXPECT_EQ(r.status[0], 0) << r.describe();
  EXPECT_EQ(r.status[1], 0) << r.describe();
  EXPECT_EQ(r.status[2], -SIGKILL) << r.describe();
}

// One rank: versions, error strings, and every argument error (the communicator stays usable).
int errors(int, int, const ncclUniqueId& id) {
  int version = 0;
  NCCLOK(ncclGetVersion(&version));
  CHECK(version == NCCL_VERSION_CODE, "version %d", version);
  CHECK(ncclGetVersion(nullptr) == ncclInvalidArgument, "null version");
  CHECK(std::strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0, "success string");
  for (int r = 1; r < ncclNumResults; ++r) {
    CHECK(std::strlen(ncclGetErrorString(static_cast<ncclResult_t>(r))) > 0, "string of %d", r);
  }
  CHECK(contains(ncclGetErrorString(ncclRemoteError), "remote"), "remote error string");
  CHECK(contains(ncclGetErrorString(ncclInProgress), "progress"), "in-progress string");

  ncclComm_t comm = nullptr;
  NCCLOK(ncclCommInitRank(&comm, 1, id, 0));
  float x[4] = {1, 2, 3, 4}, y[4] = {};
  // Bad arguments: ncclInvalidArgument, with the reason.
  CHECK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument, "null comm");
  CHECK(ncclAllReduce(x, y, 4, static_cast<ncclDataType_t>(42), ncclSum, comm, nullptr) == ncclInvalidArgument, "bad dtype");
  CHECK(contains(ncclGetLastError(comm), "datatype"), "%s", ncclGetLastError(comm));
  CHECK(ncclAllReduce(x, y, 4, ncclFloat32, static_cast<ncclRedOp_t>(17), comm, nullptr) == ncclInvalidArgument, "bad op");
  CHECK(contains(ncclGetLastError(comm), "operator"), "%s", ncclGetLastError(comm));
  CHECK(ncclBroadcast(x, y, 4, ncclFloat32, 3, comm, nullptr) == ncclInvalidArgument, "bad root");
  CHECK(contains(ncclGetLastError(comm), "root 3"), "%s", ncclGetLastError(comm));
  CHECK(ncclSend(x, 4, ncclFloat32, -1, comm, nullptr) == ncclInvalidArgument, "bad peer");
  CHECK(ncclAllReduce(nullptr, y, 4, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument, "null sendbuff");
  CHECK(contains(ncclGetLastError(comm), "sendbuff"), "%s", ncclGetLastError(comm));
  CHECK(ncclCommCount(comm, nullptr) == ncclInvalidArgument, "null count");
  CHECK(ncclCommCount(nullptr, &version) == ncclInvalidArgument, "null comm count");
  // Unsupported: ncclInvalidUsage naming what.
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "group end without start");
  CHECK(ncclDevCommCreate(comm, nullptr, nullptr) == ncclInvalidUsage, "device API");
  CHECK(contains(ncclGetLastError(comm), "device API"), "%s", ncclGetLastError(comm));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCLOK(ncclGroupStart());
  NCCLOK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, nullptr));
  CHECK(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "simulate");
  CHECK(ncclCommRevoke(comm, 5) == ncclInvalidArgument, "revoke flags");
  // A PreMulSum operator is bound to its datatype; destroyed ones are gone.
  float scale = 2;
  ncclRedOp_t op{};
  NCCLOK(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat32, ncclScalarHostImmediate, comm));
  CHECK(int(op) >= int(ncclNumOps), "op %d", int(op));
  double dx[4] = {1, 2, 3, 4}, dy[4] = {};
  CHECK(ncclAllReduce(dx, dy, 4, ncclFloat64, op, comm, nullptr) == ncclInvalidArgument, "premulsum of another type");
  NCCLOK(ncclAllReduce(x, y, 4, ncclFloat32, op, comm, nullptr));
  CHECK(y[3] == 8.0f, "premulsum at one rank: %g", y[3]);
  NCCLOK(ncclRedOpDestroy(op, comm));
  CHECK(ncclRedOpDestroy(op, comm) == ncclInvalidArgument, "double destroy");
  CHECK(ncclAllReduce(x, y, 4, ncclFloat32, op, comm, nullptr) == ncclInvalidArgument, "destroyed op");
  // A unique id that ringfold did not make.
  ncclUniqueId bad{};
  ncclComm_t other = nullptr;
  CHECK(ncclCommInitRank(&other, 1, bad, 0) == ncclInvalidArgument && other == nullptr, "foreign id");
  CHECK(contains(ncclGetLastError(nullptr), "ncclUniqueId"), "%s", ncclGetLastError(nullptr));
  CHECK(ncclCommInitRank(&other, 2, id, 2) == ncclInvalidArgument, "rank out of range");
  ncclConfig_t junk;
  std::memset(&junk, 0, sizeof junk);
  CHECK(ncclCommInitRankConfig(&other, 1, id, 0, &junk) == ncclInvalidArgument, "uninitialized config");
  // Still usable: every error above left the communicator alone.
  ncclResult_t async = ncclInternalError;
  NCCLOK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %d", int(async));
  NCCLOK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, nullptr));
  CHECK(y[0] == 1.0f && y[3] == 4.0f, "allreduce at one rank");
  // Registration, windows, ncclMemAlloc (host memory without CUDA).
  void* handle = nullptr;
  NCCLOK(ncclCommRegister(comm, x, sizeof x, &handle));
  NCCLOK(ncclCommDeregister(comm, handle));
  ncclWindow_t win = nullptr;
  NCCLOK(ncclCommWindowRegister(comm, x, sizeof x, &win, NCCL_WIN_DEFAULT));
  NCCLOK(ncclCommWindowDeregister(comm, win));
  void* mem = nullptr;
  NCCLOK(ncclMemAlloc(&mem, 1 << 20));
  CHECK(mem != nullptr, "ncclMemAlloc");
  std::memset(mem, 1, 1 << 20);
  NCCLOK(ncclMemFree(mem));
  // The device API's teams, as far as they exist here.
  const ncclTeam_t world = ncclTeamWorld(comm);
  CHECK(world.nRanks == 1 && world.rank == 0 && world.stride == 1, "world team");
  NCCLOK(ncclCommDestroy(comm));
  NCCLOK(ncclCommDestroy(nullptr));
  return 0;
}

TEST(NcclApiComm, VersionErrorStringsAndInvalidUsage) {
  const JobResult r = runJob(1, errors, 30s);
  EXPECT_TRUE(r.ok()) << r.describe();
}

int versionOverride(int, int, const ncclUniqueId&) {
  int version = 0;
  NCCLOK(ncclGetVersion(&version));
  CHECK(version == 23007, "RINGFOLD_NCCL_VERSION=23007 gave %d", version);
  return 0;
}

TEST(NcclApiComm, VersionFollowsRingfoldNcclVersion) {
  const JobResult r = runJob(1, versionOverride, 30s, {{"RINGFOLD_NCCL_VERSION", "23007"}});
  EXPECT_TRUE(r.ok()) << r.describe();
}

}  // namespace
