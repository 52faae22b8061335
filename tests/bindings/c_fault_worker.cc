// One rank of the fault tests (c_fault_test.cc), started by ringfoldrun -np 3:
//
//   bindings_c_fault_worker <scenario> <dir>
//
// Plain C ABI calls only; what it prints (FAIL / MSG / TIME / DONE lines) and its bounded
// waits are worker.h's.
//
// Scenarios
//   idle    : rank 2 stops submitting while ranks 0 and 1 wait on 'step' (run it with a short
//             RINGFOLD_STALL_SHUTDOWN_TIME). Ranks 0 and 1 get the stall error; rank 2, still not
//             calling ringfold, finds it in its own log (its stderr goes to <dir>/stderr.2), and
//             its later 'step' fails at once with the same error. Then everyone runs on.
//   oom     : rank 1 runs under an address-space limit (setrlimit RLIMIT_AS) with ~96 MiB to
//             spare: a 512 MiB reducescatter, a 120 MiB allgather, an uneven reducescatter whose
//             staging does not fit and a fused 120 MiB allreduce fail on every rank with one
//             "out of memory" message; small operations before, between and after them work.
//   oom.small : rank 1 cannot allocate a 3 MiB allgather output (below the size checked on every
//             rank first): its engine stops with "out of memory", and every peer gets that
//             message at once through the aborted communicator.
//   scaling : integer pre/post scaling as Horovod computes it (truncation toward zero).
//   frozen  : rank 1 stops (SIGSTOP) with its sockets open; the others fail with ABORTED after
//             RINGFOLD_TIMEOUT (run with the default), and rank 0 kills it.
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/ringfold.h"
#include "tests/bindings/worker.h"

namespace {

using namespace rftest;

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool init() {
  if (!horovod_init(nullptr, 0, nullptr, nullptr, 0)) {
    fail(__LINE__, err());
    return false;
  }
  gRank = horovod_rank();
  return true;
}

int64_t reducescatter(const void* in, int dtype, std::vector<int64_t> shape, const char* name, int op,
                      double pre = 1.0, double post = 1.0) {
  int64_t h = -1;
  CHECK_OK(ringfold_reducescatter_async(in, dtype, shape.data(), static_cast<int>(shape.size()), name, op, pre, post,
                                        0, RINGFOLD_CPU_DEVICE, &h));
  return h;
}

// A small allreduce every rank runs: proves the engine still works, and lines the ranks up.
void smallAllreduce(const char* name) {
  float v = static_cast<float>(gRank + 1);
  CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {1}, name, RINGFOLD_OP_SUM)));
  CHECK(v == 6.0f, std::string(name) + ": " + std::to_string(v));
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- idle: a rank that stops submitting ---------------------------------------------------------

void idle(const std::string& dir) {
  const std::string log = dir + "/stderr.2";
  const char* rankVar = std::getenv("RINGFOLD_RANK");
  if (rankVar && std::string(rankVar) == "2") {  // before init, so the engine's log lands there
    if (!std::freopen(log.c_str(), "w", stderr)) fail(__LINE__, "cannot redirect stderr to " + log);
    setvbuf(stderr, nullptr, _IONBF, 0);
  }
  if (!init()) return;
  const int r = gRank;
  smallAllreduce("warmup");
  float v = 1.0f;
  const auto start = Clock::now();
  if (r != 2) {
    std::string why;
    const int rc = finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {1}, "step", RINGFOLD_OP_SUM), &why);
    CHECK(rc == RINGFOLD_PRECONDITION_ERROR, std::to_string(rc) + ": " + why);
    timing("failed", since(start));
    message("stall", why);
  } else {
    // Not calling ringfold at all: the error still reaches this rank, in its log.
    std::string text;
    while (since(start) < kWait && !contains(text = readFile(log), "'step' stalled")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    timing("logged", since(start));
    CHECK(contains(text, "'step' stalled") && contains(text, "this rank has not submitted 'step'"), text);
    // Its next call of that tensor fails at once, with the others' message.
    const auto call = Clock::now();
    std::string why;
    const int rc = finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {1}, "step", RINGFOLD_OP_SUM), &why);
    CHECK(rc == RINGFOLD_PRECONDITION_ERROR, std::to_string(rc) + ": " + why);
    timing("call", since(call));
    message("stall", why);
  }
  smallAllreduce("after");  // the engine stays usable on every rank
  horovod_shutdown();
}

// ---- oom: one rank runs out of memory -----------------------------------------------------------

// Address space this process uses now, in bytes.
size_t addressSpace() {
  std::ifstream in("/proc/self/statm");
  size_t pages = 0;
  in >> pages;
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Zero-filled and never written: the pages stay unbacked, so a 512 MiB input costs no memory
// (the operations that use these fail before any data moves).
std::unique_ptr<float, decltype(&std::free)> zeros(size_t bytes) {
  return {static_cast<float*>(std::calloc(bytes / sizeof(float), sizeof(float))), &std::free};
}

// The operation fails on every rank with the same message, naming what the driver checks.
void expectOutOfMemory(int64_t h, const std::string& key) {
  std::string why;
  const int rc = finish(h, &why);
  CHECK(rc == RINGFOLD_UNKNOWN_ERROR, key + ": " + std::to_string(rc) + ": " + why);
  message(key, why);
}

void oom() {
  if (!init()) return;
  const int r = gRank;
  CHECK(horovod_size() == 3, std::to_string(horovod_size()));
  smallAllreduce("warmup");
  const int64_t cols = 43690;  // rows of 170.7 KiB
  const auto bigInput = zeros(size_t{3072} * cols * 4);                  // 512.0 MiB
  const auto gatherInput = zeros(size_t{40} << 20);                      // 40 MiB per rank
  const auto unevenInput = zeros(size_t{3 * 256 + 1} * 32768 * 4);       // 96.1 MiB, 769 rows
  const auto fusedInput = zeros(size_t{60} << 20);                       // twice, fused: 120 MiB
  const auto fusedOut0 = zeros(size_t{60} << 20), fusedOut1 = zeros(size_t{60} << 20);
  if (r == 1) {
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max = addressSpace() + (size_t{96} << 20);
    CHECK(setrlimit(RLIMIT_AS, &limit) == 0, std::strerror(errno));
  }
  smallAllreduce("limited");

  // 512 MiB reducescatter: each rank's output is 170.7 MiB, more than rank 1 has left.
  expectOutOfMemory(reducescatter(bigInput.get(), RINGFOLD_FLOAT32, {3072, cols}, "big.reducescatter",
                                  RINGFOLD_OP_SUM),
                    "reducescatter");
  smallAllreduce("after.reducescatter");

  // allgather of 3 x 40 MiB: the 120 MiB output does not fit on rank 1.
  int64_t h = -1;
  const int64_t gatherShape[2] = {1280, 8192};
  CHECK_OK(ringfold_allgather_async(gatherInput.get(), RINGFOLD_FLOAT32, gatherShape, 2, "big.allgather", 0,
                                    RINGFOLD_CPU_DEVICE, &h));
  expectOutOfMemory(h, "allgather");

  // Uneven reducescatter (769 rows over 3 ranks): the output fits, its zero-padded staging
  // (4 blocks of 257 rows, 128.5 MiB) does not.
  expectOutOfMemory(reducescatter(unevenInput.get(), RINGFOLD_FLOAT32, {769, 32768}, "uneven.reducescatter",
                                  RINGFOLD_OP_SUM),
                    "uneven");

  // Two 60 MiB allreduces fused (RINGFOLD_FUSION_TENSOR_MAX_BYTES=0): a 120 MiB fusion buffer.
  {
    const void* inputs[2] = {fusedInput.get(), fusedInput.get()};
    void* outputs[2] = {fusedOut0.get(), fusedOut1.get()};
    const int dtypes[2] = {RINGFOLD_FLOAT32, RINGFOLD_FLOAT32};
    const int64_t shape[1] = {int64_t{15} << 20};
    const int64_t* shapes[2] = {shape, shape};
    const int ndims[2] = {1, 1};
    const char* names[2] = {"fused.a", "fused.b"};
    int64_t handles[2] = {-1, -1};
    CHECK_OK(ringfold_grouped_allreduce_async(2, inputs, outputs, dtypes, shapes, ndims, names, RINGFOLD_OP_SUM, 1.0,
                                              1.0, 0, RINGFOLD_CPU_DEVICE, handles));
    expectOutOfMemory(handles[0], "fused");
    expectOutOfMemory(handles[1], "fused.b");
  }

  // Everything still works on every rank, rank 1 included: a small reducescatter and allgather.
  std::vector<int32_t> in(6);
  for (int i = 0; i < 6; ++i) in[i] = (r + 1) * (i + 1);
  h = reducescatter(in.data(), RINGFOLD_INT32, {6}, "small.reducescatter", RINGFOLD_OP_SUM);
  CHECK_OK(ringfold_wait(h, kWait));
  const auto part = result<int32_t>(h);
  ringfold_release(h);
  CHECK(part.size() == 2 && part[0] == 6 * (2 * r + 1) && part[1] == 6 * (2 * r + 2),
        part.size() == 2 ? std::to_string(part[0]) + "," + std::to_string(part[1]) : std::to_string(part.size()));
  const int64_t one[1] = {1};
  int32_t mine = r;
  CHECK_OK(ringfold_allgather_async(&mine, RINGFOLD_INT32, one, 1, "small.allgather", 0, RINGFOLD_CPU_DEVICE, &h));
  CHECK_OK(ringfold_wait(h, kWait));
  const auto all = result<int32_t>(h);
  ringfold_release(h);
  CHECK(all == (std::vector<int32_t>{0, 1, 2}), std::to_string(all.size()));
  smallAllreduce("end");
  horovod_shutdown();
}

// An allocation too small to be checked on every rank first (below the engine's 4 MiB) fails:
// that rank's engine stops, saying why, and every peer learns it at once (not after
// RINGFOLD_TIMEOUT, nor as "exited or crashed").
void oomSmall() {
  // One arena (a thread's own arena reserves 64 MiB of address space up front, which the limit
  // below would not see) and large blocks always from mmap: the limit then applies to them.
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  if (!init()) return;
  const int r = gRank;
  smallAllreduce("warmup");
  std::vector<float> in(size_t{1} << 18, 1.0f);  // 1 MiB per rank: a 3 MiB output
  if (r == 1) {
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max = addressSpace();
    CHECK(setrlimit(RLIMIT_AS, &limit) == 0, std::strerror(errno));
  }
  const auto start = Clock::now();
  int64_t h = -1;
  const int64_t shape[1] = {int64_t{1} << 18};
  std::string why;
  int rc = ringfold_allgather_async(in.data(), RINGFOLD_FLOAT32, shape, 1, "small.gather", 0, RINGFOLD_CPU_DEVICE, &h);
  rc = rc == RINGFOLD_OK ? finish(h, &why) : (why = err(), rc);
  timing("failed", since(start));
  CHECK(rc != RINGFOLD_OK, "the allgather succeeded");
  message("failure." + std::to_string(r), why);
  // Stay up a moment: a peer that exits now could reach a slower rank before rank 1's abort.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  horovod_shutdown();
}

// ---- scaling: integer scale factors as Horovod ---------------------------------------------------

void scaling() {
  if (!init()) return;
  const int r = gRank;
  CHECK(horovod_size() == 3, std::to_string(horovod_size()));
  const int32_t values[3] = {30, 32, 33};  // sum 95
  // postscale 0.3: int(95 * 0.3) = int(28.5) = 28 (rounding would give 29)
  int32_t a = values[r];
  CHECK_OK(finish(allreduce(&a, &a, RINGFOLD_INT32, {1}, "post.int32", RINGFOLD_OP_SUM, 1.0, 0.3)));
  CHECK(a == 28, std::to_string(a));
  int64_t b = -values[r];
  CHECK_OK(finish(allreduce(&b, &b, RINGFOLD_INT64, {1}, "post.int64", RINGFOLD_OP_SUM, 1.0, 0.3)));
  CHECK(b == -28, std::to_string(b));
  // prescale 0.6 on every rank: int(3 * 0.6) = 1 each, sum 3 (rounding: 2 each, 6)
  int32_t c = 3;
  CHECK_OK(finish(allreduce(&c, &c, RINGFOLD_INT32, {1}, "pre.int32", RINGFOLD_OP_SUM, 0.6, 1.0)));
  CHECK(c == 3, std::to_string(c));
  // average: 95 / 3 ranks = 31.67 -> 31 (Horovod: postscale / size, truncated)
  int32_t d = values[r];
  CHECK_OK(finish(allreduce(&d, &d, RINGFOLD_INT32, {1}, "avg.int32", RINGFOLD_OP_AVERAGE)));
  CHECK(d == 31, std::to_string(d));
  // reducescatter with postscale: each rank's row is 95 * 0.3 -> 28, and -28 for int64
  const int32_t rows32[3] = {values[r], values[r], values[r]};
  int64_t h = reducescatter(rows32, RINGFOLD_INT32, {3}, "rs.int32", RINGFOLD_OP_SUM, 1.0, 0.3);
  CHECK_OK(ringfold_wait(h, kWait));
  const auto got32 = result<int32_t>(h);
  ringfold_release(h);
  CHECK(got32 == std::vector<int32_t>{28}, got32.empty() ? "empty" : std::to_string(got32[0]));
  const int64_t rows64[3] = {-values[r], -values[r], -values[r]};
  h = reducescatter(rows64, RINGFOLD_INT64, {3}, "rs.int64", RINGFOLD_OP_SUM, 1.0, 0.3);
  CHECK_OK(ringfold_wait(h, kWait));
  const auto got64 = result<int64_t>(h);
  ringfold_release(h);
  CHECK(got64 == std::vector<int64_t>{-28}, got64.empty() ? "empty" : std::to_string(got64[0]));
  horovod_shutdown();
}

// ---- frozen: a rank stops dead (SIGSTOP) with its sockets open ----------------------------------

// Run with the default RINGFOLD_TIMEOUT: only the timeout can tell. Ranks 0 and 2 wait (longer
// than kWait: the default timeout is 60 s) for ABORTED naming rank 1, then rank 0 kills it.
void frozen(const std::string& dir) {
  signal(SIGTERM, SIG_IGN);
  if (!init()) return;
  const int r = gRank;
  std::ofstream(dir + "/pid." + std::to_string(r)) << getpid();
  smallAllreduce("before");
  if (r == 1) raise(SIGSTOP);  // stays stopped until rank 0 kills it
  const auto start = Clock::now();
  float v = 1.0f;
  int64_t h = -1;
  std::string why;
  // The engine may already have failed (its negotiation waits on rank 1 too): then the enqueue
  // itself returns the failure; otherwise the wait does.
  int rc = ringfold_allreduce_async(&v, &v, RINGFOLD_FLOAT32, nullptr, 0, "after", RINGFOLD_OP_SUM, 1.0, 1.0, 0,
                                    RINGFOLD_CPU_DEVICE, &h);
  if (rc == RINGFOLD_OK) {
    rc = ringfold_wait(h, 3 * kWait);
    why = err();
    if (rc != RINGFOLD_IN_PROGRESS) ringfold_release(h);
  } else {
    why = err();
  }
  timing("failed", since(start));
  CHECK(rc == RINGFOLD_ABORTED, std::to_string(rc) + ": " + why);
  message("failure." + std::to_string(r), why);
  if (r == 0) {
    std::ifstream in(dir + "/pid.1");
    pid_t pid = 0;
    in >> pid;
    if (pid > 0) kill(pid, SIGKILL);
  }
  horovod_shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  return rftest::runScenario(argc, argv, true, {
      {"idle", [](const std::string& dir) { idle(dir); }},
      {"oom", [](const std::string&) { oom(); }},
      {"oom.small", [](const std::string&) { oomSmall(); }},
      {"scaling", [](const std::string&) { scaling(); }},
      {"frozen", [](const std::string& dir) { frozen(dir); }},
  });
}
