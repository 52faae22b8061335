// The C ABI (bindings/c/ringfold.h) in one process: rank 0 of 1, no launcher variables.
// Every entry point is called through the C header only: init/shutdown/re-init, every query,
// every collective with its result checked, auto-naming (observed through the timeline), and
// bad input of every kind, each returning its status code and a message that names the problem.
// Waits are bounded, so an engine that never completes a handle fails the test instead of
// hanging it.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/ringfold.h"
#include "tests/support/sanitizers.h"

// Set in the fork()ed child of CApi.ForkedChildSeesNotInitialized.
static std::atomic<bool> gForkedChild{false};

#if defined(RF_ASAN_BUILD)
// LeakSanitizer's hook (sanitizer/lsan_interface.h): no leak check at that child's exit. Its
// thread registry still lists the parent's threads, which do not exist in the child, so the
// check warns "Running thread N was not suspended. False leaks are possible." (a report to
// scripts/sanitize.sh); and the parent's engine that the child keeps reachable is no leak.
extern "C" int __lsan_is_turned_off() { return gForkedChild.load() ? 1 : 0; }
#endif

namespace {

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }
std::string lastError() { return ringfold_last_error(); }

// Expects `call` to return `code` with a last-error message containing every one of `parts`.
#define EXPECT_FAILS(call, code, ...)                                                  \
  do {                                                                                 \
    const int rc_ = (call);                                                            \
    const std::string err_ = lastError();                                              \
    EXPECT_EQ(rc_, (code)) << #call << " -> " << err_;                                 \
    for (const char* part_ : {__VA_ARGS__}) {                                          \
      EXPECT_TRUE(contains(err_, part_)) << #call << ": '" << err_ << "' lacks '" << part_ << "'"; \
    }                                                                                  \
  } while (0)

#define ASSERT_OK(call) ASSERT_EQ((call), RINGFOLD_OK) << #call << ": " << lastError()
#define EXPECT_OK(call) EXPECT_EQ((call), RINGFOLD_OK) << #call << ": " << lastError()

constexpr double kWait = 30.0;  // seconds; one rank completes in milliseconds

// Launcher variables that would make this process something else than rank 0 of 1.
void clearLauncherEnvironment() {
  for (const char* v : {"RINGFOLD_RANK", "RINGFOLD_SIZE", "RINGFOLD_LOCAL_RANK", "RINGFOLD_LOCAL_SIZE",
                        "RINGFOLD_CROSS_RANK", "RINGFOLD_CROSS_SIZE", "RINGFOLD_STORE_ADDR", "RINGFOLD_STORE_PORT",
                        "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                        "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE", "GROUP_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "SLURM_PROCID", "SLURM_NTASKS", "RINGFOLD_DYNAMIC_PROCESS_SETS",
                        "HOROVOD_DYNAMIC_PROCESS_SETS", "RINGFOLD_TIMELINE", "HOROVOD_TIMELINE"}) {
    unsetenv(v);
  }
}

class CApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { clearLauncherEnvironment(); }
  void TearDown() override {
    horovod_shutdown();
    unsetenv("RINGFOLD_DYNAMIC_PROCESS_SETS");
  }
  static void init() { ASSERT_TRUE(horovod_init(nullptr, 0, nullptr, nullptr, 0)) << lastError(); }
};

int64_t allreduce(const void* in, void* out, int dtype, std::vector<int64_t> shape, const char* name, int op,
                  double pre = 1.0, double post = 1.0, int set = 0) {
  int64_t h = -1;
  EXPECT_OK(ringfold_allreduce_async(in, out, dtype, shape.data(), static_cast<int>(shape.size()), name, op, pre, post,
                                     set, RINGFOLD_CPU_DEVICE, &h));
  return h;
}

void waitRelease(int64_t h) {
  EXPECT_OK(ringfold_wait(h, kWait));
  EXPECT_OK(ringfold_release(h));
}

std::vector<int64_t> resultShape(int64_t h) {
  int ndim = -1;
  EXPECT_OK(ringfold_result_ndim(h, &ndim));
  std::vector<int64_t> shape(std::max(ndim, 0));
  EXPECT_OK(ringfold_result_shape(h, shape.data(), ndim));
  return shape;
}

template <typename T>
std::vector<T> resultData(int64_t h) {
  size_t bytes = 0;
  EXPECT_OK(ringfold_result_bytes(h, &bytes));
  std::vector<T> out(bytes / sizeof(T));
  EXPECT_OK(ringfold_result_copy(h, out.data(), bytes));
  const void* borrowed = nullptr;
  EXPECT_OK(ringfold_result_data(h, &borrowed));
  if (bytes > 0) {
    EXPECT_NE(borrowed, nullptr);
    EXPECT_EQ(std::memcmp(borrowed, out.data(), bytes), 0);
  }
  return out;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string tempPath(const std::string& leaf) {
  return (std::filesystem::temp_directory_path() / (leaf + "." + std::to_string(getpid()))).string();
}

// ---- before init ------------------------------------------------------------------------------

TEST_F(CApi, EverythingBeforeInitFailsCleanly) {
  EXPECT_EQ(horovod_is_initialized(), 0);
  for (auto f : {horovod_rank, horovod_local_rank, horovod_size, horovod_local_size, horovod_cross_rank,
                 horovod_cross_size, horovod_mpi_threads_supported}) {
    EXPECT_EQ(f(), -1);
    EXPECT_TRUE(contains(lastError(), "not initialized")) << lastError();
  }
  EXPECT_FALSE(horovod_is_homogeneous());
  EXPECT_EQ(horovod_number_of_process_sets(), 0);
  EXPECT_EQ(horovod_process_set_rank(0), -1);
  EXPECT_EQ(horovod_process_set_size(0), -1);
  EXPECT_EQ(horovod_process_set_included(0), 1);  // as Horovod
  EXPECT_EQ(horovod_process_set_rank(1), HOROVOD_PROCESS_SET_ERROR_INIT);
  EXPECT_EQ(horovod_process_set_size(1), HOROVOD_PROCESS_SET_ERROR_INIT);
  EXPECT_EQ(horovod_process_set_included(1), HOROVOD_PROCESS_SET_ERROR_INIT);
  const int r0 = 0;
  EXPECT_EQ(horovod_add_process_set(&r0, 1), HOROVOD_PROCESS_SET_ERROR_INIT);
  EXPECT_EQ(horovod_remove_process_set(1), HOROVOD_PROCESS_SET_ERROR_INIT);
  int ranks[4];
  EXPECT_EQ(horovod_process_set_ranks(0, ranks), HOROVOD_PROCESS_SET_ERROR_INIT);
  int ids[4] = {-9, -9, -9, -9};
  horovod_process_set_ids(ids);
  EXPECT_EQ(ids[0], -9);
  EXPECT_TRUE(contains(lastError(), "not initialized")) << lastError();
  EXPECT_EQ(horovod_start_timeline("/tmp/x.json", false), -1);
  EXPECT_EQ(horovod_stop_timeline(), -1);

  float x[2] = {1, 2};
  int64_t shape[1] = {2}, h = 77;
  EXPECT_FAILS(ringfold_allreduce_async(x, x, RINGFOLD_FLOAT32, shape, 1, "x", RINGFOLD_OP_SUM, 1, 1, 0, -1, &h),
               RINGFOLD_PRECONDITION_ERROR, "ringfold_allreduce_async", "not initialized");
  EXPECT_EQ(h, 77);
  EXPECT_FAILS(ringfold_allgather_async(x, RINGFOLD_FLOAT32, shape, 1, "x", 0, -1, &h), RINGFOLD_PRECONDITION_ERROR,
               "not initialized");
  EXPECT_FAILS(ringfold_broadcast_async(x, x, RINGFOLD_FLOAT32, shape, 1, 0, "x", 0, -1, &h),
               RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_alltoall_async(x, RINGFOLD_FLOAT32, shape, 1, nullptr, 0, "x", 0, -1, &h),
               RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_reducescatter_async(x, RINGFOLD_FLOAT32, shape, 1, "x", RINGFOLD_OP_SUM, 1, 1, 0, -1, &h),
               RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_join_async(0, &h), RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_barrier_async(0, &h), RINGFOLD_PRECONDITION_ERROR, "not initialized");
  const void* in[1] = {x};
  void* out[1] = {x};
  const int dt[1] = {RINGFOLD_FLOAT32}, nd[1] = {1};
  const int64_t* shapes[1] = {shape};
  EXPECT_FAILS(ringfold_grouped_allreduce_async(1, in, out, dt, shapes, nd, nullptr, RINGFOLD_OP_SUM, 1, 1, 0, -1, &h),
               RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_EQ(ringfold_poll(1), -RINGFOLD_PRECONDITION_ERROR);
  EXPECT_FAILS(ringfold_wait(1, 1.0), RINGFOLD_PRECONDITION_ERROR, "ringfold_wait", "not initialized");
  EXPECT_FAILS(ringfold_release(1), RINGFOLD_PRECONDITION_ERROR, "not initialized");
  int n = 0;
  size_t bytes = 0;
  const void* data = nullptr;
  int64_t dims[2];
  EXPECT_FAILS(ringfold_result_ndim(1, &n), RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_result_shape(1, dims, 2), RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_result_bytes(1, &bytes), RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_result_copy(1, x, 8), RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_result_data(1, &data), RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_result_received_splits(1, dims, 2), RINGFOLD_PRECONDITION_ERROR, "not initialized");
  EXPECT_FAILS(ringfold_join_last_rank(1, &n), RINGFOLD_PRECONDITION_ERROR, "not initialized");

  horovod_shutdown();  // not initialized: nothing to do
  EXPECT_EQ(lastError(), "");
  EXPECT_OK(ringfold_shutdown());
}

TEST_F(CApi, BuildFlagsReduceOpCodesAndVersion) {
  EXPECT_FALSE(horovod_mpi_enabled());
  EXPECT_FALSE(horovod_mpi_built());
  EXPECT_FALSE(horovod_gloo_enabled());
  EXPECT_FALSE(horovod_gloo_built());
  EXPECT_EQ(horovod_nccl_built(), 0);
  EXPECT_FALSE(horovod_ddl_built());
  EXPECT_FALSE(horovod_ccl_built());
#if defined(RINGFOLD_HAVE_CUDA_TOOLKIT)
  EXPECT_TRUE(horovod_cuda_built());  // the kernels are built, so the engine takes GPU tensors
#else
  EXPECT_FALSE(horovod_cuda_built());
#endif
  EXPECT_FALSE(horovod_rocm_built());
  EXPECT_EQ(horovod_reduce_op_average(), 0);
  EXPECT_EQ(horovod_reduce_op_sum(), 1);
  EXPECT_EQ(horovod_reduce_op_adasum(), 2);
  EXPECT_EQ(horovod_reduce_op_min(), 3);
  EXPECT_EQ(horovod_reduce_op_max(), 4);
  EXPECT_EQ(horovod_reduce_op_product(), 5);
  EXPECT_TRUE(std::regex_match(std::string(ringfold_version()), std::regex(R"(\d+\.\d+\.\d+)")))
      << ringfold_version();
}

// ---- init, queries, shutdown ------------------------------------------------------------------

TEST_F(CApi, InitQueriesShutdownAndReinit) {
  init();
  EXPECT_EQ(lastError(), "");
  EXPECT_EQ(horovod_is_initialized(), 1);
  EXPECT_EQ(horovod_rank(), 0);
  EXPECT_EQ(horovod_size(), 1);
  EXPECT_EQ(horovod_local_rank(), 0);
  EXPECT_EQ(horovod_local_size(), 1);
  EXPECT_EQ(horovod_cross_rank(), 0);
  EXPECT_EQ(horovod_cross_size(), 1);
  EXPECT_TRUE(horovod_is_homogeneous());
  EXPECT_EQ(horovod_mpi_threads_supported(), 0);
  EXPECT_EQ(horovod_number_of_process_sets(), 1);
  int ids[1] = {-1};
  horovod_process_set_ids(ids);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(horovod_process_set_rank(0), 0);
  EXPECT_EQ(horovod_process_set_size(0), 1);
  int ranks[1] = {-1};
  EXPECT_EQ(horovod_process_set_ranks(0, ranks), 0);
  EXPECT_EQ(ranks[0], 0);

  // A second init while initialized does nothing and succeeds.
  EXPECT_TRUE(horovod_init(nullptr, 0, nullptr, nullptr, 0));
  EXPECT_OK(ringfold_init(nullptr, 0, nullptr, nullptr, 0));

  float x[3] = {1, 2, 3}, y[3] = {};
  const int64_t old = allreduce(x, y, RINGFOLD_FLOAT32, {3}, "before", RINGFOLD_OP_SUM);
  EXPECT_OK(ringfold_wait(old, kWait));
  EXPECT_EQ(y[2], 3.0f);

  horovod_shutdown();
  EXPECT_EQ(horovod_is_initialized(), 0);
  EXPECT_EQ(horovod_rank(), -1);
  int64_t unused = -1;
  EXPECT_FAILS(ringfold_allreduce_async(x, y, RINGFOLD_FLOAT32, nullptr, 0, "after", 1, 1, 1, 0, -1, &unused),
               RINGFOLD_PRECONDITION_ERROR, "not initialized");

  // Re-init (as elastic Horovod does): works, and the old handle is not mistaken for a new one.
  ASSERT_OK(ringfold_init(nullptr, 0, nullptr, nullptr, 0));
  EXPECT_EQ(horovod_size(), 1);
  EXPECT_FAILS(ringfold_wait(old, 1.0), RINGFOLD_INVALID_ARGUMENT, "unknown handle");
  EXPECT_EQ(ringfold_poll(old), -RINGFOLD_INVALID_ARGUMENT);
  EXPECT_FAILS(ringfold_release(old), RINGFOLD_INVALID_ARGUMENT, "unknown handle");
  float z[3] = {};
  const int64_t h = allreduce(x, z, RINGFOLD_FLOAT32, {3}, "before", RINGFOLD_OP_SUM);  // same name: fine
  EXPECT_NE(h, old);
  waitRelease(h);
  EXPECT_EQ(z[1], 2.0f);
  EXPECT_OK(ringfold_shutdown());
  EXPECT_EQ(horovod_is_initialized(), 0);
  for (int i = 0; i < 3; ++i) {  // several cycles in a row
    ASSERT_OK(ringfold_init(nullptr, 0, nullptr, nullptr, 0));
    EXPECT_OK(ringfold_shutdown());
  }
}

TEST_F(CApi, InitArgumentsAreChecked) {
  const int zero = 0, one = 1;
  EXPECT_TRUE(horovod_init(&zero, 1, nullptr, nullptr, 0)) << lastError();  // all ranks, in order
  horovod_shutdown();

  EXPECT_FALSE(horovod_init(&one, 1, nullptr, nullptr, 0));
  EXPECT_TRUE(contains(lastError(), "horovod_init: init with ranks [1] is not supported")) << lastError();
  EXPECT_TRUE(contains(lastError(), "process set")) << lastError();
  EXPECT_EQ(horovod_is_initialized(), 0);
  const int two[2] = {0, 1};
  EXPECT_FAILS(ringfold_init(two, 2, nullptr, nullptr, 0), RINGFOLD_INVALID_ARGUMENT, "not supported");
  EXPECT_FAILS(ringfold_init(nullptr, -1, nullptr, nullptr, 0), RINGFOLD_INVALID_ARGUMENT, "nranks is -1");
  EXPECT_FAILS(ringfold_init(nullptr, 2, nullptr, nullptr, 0), RINGFOLD_INVALID_ARGUMENT, "ranks is NULL");
  EXPECT_FAILS(ringfold_init(nullptr, 0, nullptr, nullptr, -2), RINGFOLD_INVALID_ARGUMENT, "num_ps is -2");
  EXPECT_FAILS(ringfold_init(nullptr, 0, &zero, nullptr, 1), RINGFOLD_INVALID_ARGUMENT, "ps_sizes is NULL");
  EXPECT_FAILS(ringfold_init(nullptr, 0, nullptr, &one, 1), RINGFOLD_INVALID_ARGUMENT, "ps_ranks is NULL");
  EXPECT_FAILS(ringfold_init(nullptr, 0, &zero, &zero, 1), RINGFOLD_INVALID_ARGUMENT,
               "process set 0 passed to init has 0 ranks");
  const int bad[1] = {3};
  EXPECT_FAILS(ringfold_init(nullptr, 0, bad, &one, 1), RINGFOLD_INVALID_ARGUMENT, "rank 3 is out of range");
  EXPECT_EQ(horovod_is_initialized(), 0);
  // A bad environment variable is named.
  setenv("RINGFOLD_DYNAMIC_PROCESS_SETS", "perhaps", 1);
  EXPECT_FAILS(ringfold_init(nullptr, 0, nullptr, nullptr, 0), RINGFOLD_INVALID_ARGUMENT,
               "RINGFOLD_DYNAMIC_PROCESS_SETS");
  unsetenv("RINGFOLD_DYNAMIC_PROCESS_SETS");
  EXPECT_OK(ringfold_init(nullptr, 0, nullptr, nullptr, 0));
}

// ---- collectives ------------------------------------------------------------------------------

TEST_F(CApi, AllreduceOpsAndScales) {
  init();
  const float x[5] = {1.5f, -2.0f, 3.0f, 0.0f, 8.0f};
  struct Case {
    int op;
    double pre, post;
  };
  for (const Case c : {Case{RINGFOLD_OP_SUM, 2.0, 0.5}, Case{RINGFOLD_OP_AVERAGE, 3.0, 1.0},
                       Case{RINGFOLD_OP_MIN, 1.0, 4.0}, Case{RINGFOLD_OP_MAX, 0.5, 1.0},
                       Case{RINGFOLD_OP_PRODUCT, 1.0, 1.0}}) {
    SCOPED_TRACE(c.op);
    float y[5] = {};
    const int64_t h = allreduce(x, y, RINGFOLD_FLOAT32, {5}, "ops", c.op, c.pre, c.post);
    waitRelease(h);
    for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(y[i], static_cast<float>(x[i] * c.pre * c.post)) << i;
  }
  // In place, 2-D, int32 and float64.
  int32_t a[6] = {1, 2, 3, 4, 5, 6};
  waitRelease(allreduce(a, a, RINGFOLD_INT32, {2, 3}, "inplace.i32", RINGFOLD_OP_SUM));
  EXPECT_EQ(a[5], 6);
  double d[2] = {0.25, -1.0};
  waitRelease(allreduce(d, d, RINGFOLD_FLOAT64, {2}, "f64", RINGFOLD_OP_AVERAGE, 4.0, 0.5));
  EXPECT_DOUBLE_EQ(d[0], 0.5);
  EXPECT_DOUBLE_EQ(d[1], -2.0);
  // A scalar (ndim 0, shape NULL) and an empty tensor (no buffers needed).
  float s = 7.0f, t = 0.0f;
  int64_t h = -1;
  ASSERT_OK(ringfold_allreduce_async(&s, &t, RINGFOLD_FLOAT32, nullptr, 0, "scalar", RINGFOLD_OP_SUM, 1, 1, 0,
                                     RINGFOLD_CPU_DEVICE, &h));
  waitRelease(h);
  EXPECT_EQ(t, 7.0f);
  const int64_t empty[2] = {0, 4};
  ASSERT_OK(ringfold_allreduce_async(nullptr, nullptr, RINGFOLD_FLOAT32, empty, 2, "empty", RINGFOLD_OP_SUM, 1, 1, 0,
                                     RINGFOLD_CPU_DEVICE, &h));
  waitRelease(h);
  // An allreduce has no engine-allocated result.
  float u[2] = {1, 2};
  h = allreduce(u, u, RINGFOLD_FLOAT32, {2}, "noresult", RINGFOLD_OP_SUM);
  ASSERT_OK(ringfold_wait(h, kWait));
  EXPECT_EQ(ringfold_poll(h), 1);
  int ndim = -1;
  size_t bytes = 99;
  const void* data = &ndim;
  EXPECT_OK(ringfold_result_ndim(h, &ndim));
  EXPECT_EQ(ndim, 0);
  EXPECT_OK(ringfold_result_bytes(h, &bytes));
  EXPECT_EQ(bytes, 0u);
  EXPECT_OK(ringfold_result_data(h, &data));
  EXPECT_EQ(data, nullptr);
  EXPECT_OK(ringfold_result_copy(h, nullptr, 0));
  EXPECT_FAILS(ringfold_result_copy(h, u, sizeof u), RINGFOLD_INVALID_ARGUMENT, "ringfold_result_copy",
               "has a result of 0 bytes, not 8", "caller's output");
  EXPECT_OK(ringfold_release(h));
}

TEST_F(CApi, GroupedAllreduce) {
  init();
  float a[3] = {1, 2, 3};
  int64_t b[2] = {10, 20};
  double c = 0.5;
  float ao[3];
  int64_t bo[2];
  double co;
  const void* in[3] = {a, b, &c};
  void* out[3] = {ao, bo, &co};
  const int dtypes[3] = {RINGFOLD_FLOAT32, RINGFOLD_INT64, RINGFOLD_FLOAT64};
  const int64_t sa[1] = {3}, sb[2] = {1, 2};
  const int64_t* shapes[3] = {sa, sb, nullptr};
  const int ndims[3] = {1, 2, 0};
  const char* names[3] = {"g.a", nullptr, "g.c"};
  int64_t handles[3] = {-1, -1, -1};
  ASSERT_OK(ringfold_grouped_allreduce_async(3, in, out, dtypes, shapes, ndims, names, RINGFOLD_OP_SUM, 2.0, 1.0, 0,
                                             RINGFOLD_CPU_DEVICE, handles));
  for (int64_t h : handles) waitRelease(h);
  EXPECT_EQ(ao[2], 6.0f);
  EXPECT_EQ(bo[1], 40);
  EXPECT_EQ(co, 1.0);
  // Nothing to do.
  EXPECT_OK(ringfold_grouped_allreduce_async(0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 0, -1,
                                             nullptr));
  // One bad tensor: nothing is enqueued and no handle is written.
  const int badTypes[3] = {RINGFOLD_FLOAT32, 42, RINGFOLD_FLOAT64};
  handles[0] = handles[1] = handles[2] = -5;
  EXPECT_FAILS(ringfold_grouped_allreduce_async(3, in, out, badTypes, shapes, ndims, names, RINGFOLD_OP_SUM, 1, 1, 0,
                                                -1, handles),
               RINGFOLD_INVALID_ARGUMENT, "ringfold_grouped_allreduce_async: tensor 1: unknown dtype code 42");
  EXPECT_EQ(handles[0], -5);
  // The same name twice in one group.
  const char* dup[3] = {"g.same", "g.other", "g.same"};
  EXPECT_FAILS(ringfold_grouped_allreduce_async(3, in, out, dtypes, shapes, ndims, dup, RINGFOLD_OP_SUM, 1, 1, 0, -1,
                                                handles),
               RINGFOLD_INVALID_ARGUMENT, "g.same", "already in flight");
  EXPECT_EQ(handles[0], -5);
  EXPECT_FAILS(ringfold_grouped_allreduce_async(-1, in, out, dtypes, shapes, ndims, names, 1, 1, 1, 0, -1, handles),
               RINGFOLD_INVALID_ARGUMENT, "count is -1");
  EXPECT_FAILS(ringfold_grouped_allreduce_async(3, nullptr, out, dtypes, shapes, ndims, names, 1, 1, 1, 0, -1, handles),
               RINGFOLD_INVALID_ARGUMENT, "inputs is NULL");
  EXPECT_FAILS(ringfold_grouped_allreduce_async(3, in, out, dtypes, shapes, ndims, names, 1, 1, 1, 0, -1, nullptr),
               RINGFOLD_INVALID_ARGUMENT, "handles is NULL");
}

TEST_F(CApi, AllgatherBroadcastAlltoallReducescatter) {
  init();
  // Allgather of [2, 3]: the engine allocates [2, 3].
  const int16_t raw[6] = {1, 2, 3, 4, 5, 6};  // as uint8 pairs: any 12 bytes
  const int64_t s23[2] = {2, 3};
  int64_t h = -1;
  ASSERT_OK(ringfold_allgather_async(raw, RINGFOLD_UINT8, s23, 2, "ag", 0, RINGFOLD_CPU_DEVICE, &h));
  ASSERT_OK(ringfold_wait(h, kWait));
  EXPECT_EQ(resultShape(h), (std::vector<int64_t>{2, 3}));
  const auto gathered = resultData<uint8_t>(h);
  ASSERT_EQ(gathered.size(), 6u);
  EXPECT_EQ(std::memcmp(gathered.data(), raw, 6), 0);
  EXPECT_FAILS(ringfold_result_copy(h, nullptr, 5), RINGFOLD_INVALID_ARGUMENT, "has a result of 6 bytes, not 5");
  int64_t dims[1];
  EXPECT_FAILS(ringfold_result_shape(h, dims, 1), RINGFOLD_INVALID_ARGUMENT, "capacity 1 is less than the result's 2");
  EXPECT_FAILS(ringfold_result_received_splits(h, dims, 1), RINGFOLD_INVALID_ARGUMENT, "no received splits");
  int last = 0;
  EXPECT_FAILS(ringfold_join_last_rank(h, &last), RINGFOLD_INVALID_ARGUMENT, "is not a join");
  EXPECT_OK(ringfold_release(h));
  EXPECT_FAILS(ringfold_release(h), RINGFOLD_INVALID_ARGUMENT, "unknown handle");

  // Bool allgather is allowed (copy only).
  const bool flags[2] = {true, false};
  const int64_t s2[1] = {2};
  ASSERT_OK(ringfold_allgather_async(flags, RINGFOLD_BOOL, s2, 1, "ag.bool", 0, -1, &h));
  ASSERT_OK(ringfold_wait(h, kWait));
  EXPECT_EQ(resultData<uint8_t>(h), (std::vector<uint8_t>{1, 0}));
  EXPECT_OK(ringfold_release(h));

  // Broadcast from root 0 into a separate output.
  const double bin[3] = {1.25, 2.5, -3.0};
  double bout[3] = {};
  const int64_t s3[1] = {3};
  ASSERT_OK(ringfold_broadcast_async(bin, bout, RINGFOLD_FLOAT64, s3, 1, 0, "bc", 0, -1, &h));
  waitRelease(h);
  EXPECT_EQ(bout[2], -3.0);

  // Alltoall with explicit splits (one rank: all 4 rows to itself) and with equal splits.
  const int32_t rows[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const int64_t s42[2] = {4, 2};
  const int64_t splits[1] = {4};
  ASSERT_OK(ringfold_alltoall_async(rows, RINGFOLD_INT32, s42, 2, splits, 1, "a2a", 0, -1, &h));
  ASSERT_OK(ringfold_wait(h, kWait));
  EXPECT_EQ(resultShape(h), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(resultData<int32_t>(h), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  int64_t received[2] = {-1, -1};
  EXPECT_OK(ringfold_result_received_splits(h, received, 2));
  EXPECT_EQ(received[0], 4);
  EXPECT_EQ(received[1], -1);
  EXPECT_FAILS(ringfold_result_received_splits(h, received, 0), RINGFOLD_INVALID_ARGUMENT, "capacity 0");
  EXPECT_OK(ringfold_release(h));
  ASSERT_OK(ringfold_alltoall_async(rows, RINGFOLD_INT32, s42, 2, nullptr, 0, "a2a.equal", 0, -1, &h));
  ASSERT_OK(ringfold_wait(h, kWait));
  EXPECT_EQ(resultData<int32_t>(h).size(), 8u);
  EXPECT_OK(ringfold_release(h));

  // Reducescatter of [5, 2] with scales: one rank keeps all 5 rows.
  const float rs[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const int64_t s52[2] = {5, 2};
  ASSERT_OK(ringfold_reducescatter_async(rs, RINGFOLD_FLOAT32, s52, 2, "rs", RINGFOLD_OP_SUM, 2.0, 0.25, 0, -1, &h));
  ASSERT_OK(ringfold_wait(h, kWait));
  EXPECT_EQ(resultShape(h), (std::vector<int64_t>{5, 2}));
  const auto reduced = resultData<float>(h);
  ASSERT_EQ(reduced.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(reduced[i], rs[i] * 0.5f) << i;
  EXPECT_OK(ringfold_release(h));
  ASSERT_OK(ringfold_reducescatter_async(rs, RINGFOLD_FLOAT32, s52, 2, "rs.avg", RINGFOLD_OP_AVERAGE, 1, 1, 0, -1, &h));
  ASSERT_OK(ringfold_wait(h, kWait));
  EXPECT_EQ(resultData<float>(h)[9], 9.0f);
  EXPECT_OK(ringfold_release(h));
}

// The struct entry point: tensors as ringfold_tensor_t, the operation as ringfold_op_t.
TEST_F(CApi, EnqueueWithStructsAndCancel) {
  init();
  const float in[3] = {1.0f, 2.0f, 3.0f};
  float out[3] = {};
  const int64_t shape[1] = {3};
  ringfold_tensor_t tin = {in, RINGFOLD_FLOAT32, shape, 1, RINGFOLD_CPU_DEVICE, nullptr};
  ringfold_tensor_t tout = {out, RINGFOLD_FLOAT32, shape, 1, RINGFOLD_CPU_DEVICE, nullptr};
  ringfold_op_t op = {};
  op.type = RINGFOLD_ALLREDUCE;
  op.name = "struct.ar";
  op.reduce_op = RINGFOLD_OP_SUM;
  op.postscale = 2.0;  // prescale 0 means 1
  int64_t h = -1;
  ASSERT_OK(ringfold_enqueue(&op, &tin, &tout, &h));
  waitRelease(h);
  EXPECT_EQ(out[2], 6.0f);

  op.type = RINGFOLD_ALLGATHER;
  op.name = "struct.ag";
  ASSERT_OK(ringfold_enqueue(&op, &tin, nullptr, &h));
  ASSERT_OK(ringfold_wait(h, kWait));
  EXPECT_EQ(resultData<float>(h), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_OK(ringfold_release(h));

  // Reduce: one rank, so the root's output is postscale * input; a root outside the set fails.
  op.type = RINGFOLD_REDUCE;
  op.name = "struct.reduce";
  op.root = 0;
  std::fill(out, out + 3, 0.0f);
  ASSERT_OK(ringfold_enqueue(&op, &tin, &tout, &h));
  waitRelease(h);
  EXPECT_EQ(out[2], 6.0f);
  op.name = "struct.reduce.root";
  op.root = 1;
  ASSERT_OK(ringfold_enqueue(&op, &tin, &tout, &h));
  EXPECT_EQ(ringfold_wait(h, kWait), RINGFOLD_PRECONDITION_ERROR);
  EXPECT_NE(lastError().find("reduce 'struct.reduce.root': root rank 1 is not in the process set of 1 ranks"),
            std::string::npos)
      << lastError();
  EXPECT_OK(ringfold_release(h));
  op.root = 0;

  op.type = RINGFOLD_BARRIER;
  ASSERT_OK(ringfold_enqueue(&op, nullptr, nullptr, &h));
  waitRelease(h);

  op.type = 42;
  EXPECT_FAILS(ringfold_enqueue(&op, &tin, &tout, &h), RINGFOLD_INVALID_ARGUMENT, "unknown operation type 42");
  op.type = RINGFOLD_ALLREDUCE;
  EXPECT_FAILS(ringfold_enqueue(nullptr, &tin, &tout, &h), RINGFOLD_INVALID_ARGUMENT, "op");
  EXPECT_FAILS(ringfold_enqueue(&op, nullptr, &tout, &h), RINGFOLD_INVALID_ARGUMENT, "input");
  int fakeStream = 0;
  tin.stream = &fakeStream;
#if defined(RINGFOLD_HAVE_CUDA_TOOLKIT)
  EXPECT_FAILS(ringfold_enqueue(&op, &tin, &tout, &h), RINGFOLD_INVALID_ARGUMENT, "stream was given for a CPU tensor");
#else
  EXPECT_FAILS(ringfold_enqueue(&op, &tin, &tout, &h), RINGFOLD_INVALID_ARGUMENT, "no CUDA support");
#endif
  tin.stream = nullptr;

  // A GPU tensor: refused at enqueue, naming the tensor, when there is no CUDA support or no
  // device (with a device, tests/kernels' gpu-label tests run it).
  op.name = "struct.gpu";
  tin.device = tout.device = 0;
  if (ringfold_cuda_device() < 0) {
#if defined(RINGFOLD_HAVE_CUDA_TOOLKIT)
    EXPECT_FAILS(ringfold_enqueue(&op, &tin, &tout, &h), RINGFOLD_INVALID_ARGUMENT,
                 "allreduce 'struct.gpu' is on GPU 0, but no CUDA device is available (cudaGetDeviceCount");
#else
    EXPECT_FAILS(ringfold_enqueue(&op, &tin, &tout, &h), RINGFOLD_INVALID_ARGUMENT, "no CUDA support");
#endif
  }
  op.type = RINGFOLD_ALLGATHER;
  EXPECT_FAILS(ringfold_enqueue(&op, &tin, nullptr, &h), RINGFOLD_INVALID_ARGUMENT,
               "GPU tensors are supported by allreduce and broadcast");
  op.type = RINGFOLD_ALLREDUCE;
  tin.device = tout.device = RINGFOLD_CPU_DEVICE;

  // Cancel: with one rank a tensor is reported within a cycle, so cancel either wins (ABORTED,
  // "cancelled") or the allreduce completes normally; both are correct, a hang or another status
  // is not. Unknown handles are refused.
  op.name = "struct.cancel";
  ASSERT_OK(ringfold_enqueue(&op, &tin, &tout, &h));
  EXPECT_OK(ringfold_cancel(h));
  const int rc = ringfold_wait(h, kWait);
  EXPECT_TRUE(rc == RINGFOLD_OK || (rc == RINGFOLD_ABORTED && lastError() == std::string("cancelled")))
      << rc << " " << lastError();
  EXPECT_OK(ringfold_release(h));
  EXPECT_FAILS(ringfold_cancel(h), RINGFOLD_INVALID_ARGUMENT, "unknown handle");
}

TEST_F(CApi, JoinAndBarrier) {
  init();
  int64_t h = -1;
  ASSERT_OK(ringfold_join_async(0, &h));
  ASSERT_OK(ringfold_wait(h, kWait));
  int last = -1;
  EXPECT_OK(ringfold_join_last_rank(h, &last));
  EXPECT_EQ(last, 0);
  EXPECT_OK(ringfold_release(h));
  ASSERT_OK(ringfold_barrier_async(0, &h));
  waitRelease(h);
  // Again, after the join completed.
  ASSERT_OK(ringfold_join_async(0, &h));
  waitRelease(h);
  EXPECT_FAILS(ringfold_join_async(0, nullptr), RINGFOLD_INVALID_ARGUMENT, "handle is NULL");
  EXPECT_FAILS(ringfold_barrier_async(3, &h), RINGFOLD_INVALID_ARGUMENT, "unknown process set 3");
  EXPECT_FAILS(ringfold_join_async(-1, &h), RINGFOLD_INVALID_ARGUMENT, "unknown process set -1");
}

// ---- names --------------------------------------------------------------------------------------

TEST_F(CApi, UnnamedTensorsGetPerOpCounters) {
  const std::string path = tempPath("ringfold_c_api_names.json");
  for (int round = 0; round < 2; ++round) {  // counters restart at init
    SCOPED_TRACE(round);
    std::filesystem::remove(path);
    init();
    ASSERT_EQ(horovod_start_timeline(path.c_str(), false), 1) << lastError();
    float x[2] = {1, 2}, y[2];
    int64_t h1 = -1, h2 = -1, h3 = -1;
    const int64_t s[1] = {2};
    // Two unnamed allreduces in flight at once: different names, so no "already in flight".
    ASSERT_OK(ringfold_allreduce_async(x, y, RINGFOLD_FLOAT32, s, 1, nullptr, 1, 1, 1, 0, -1, &h1));
    ASSERT_OK(ringfold_allreduce_async(x, x, RINGFOLD_FLOAT32, s, 1, nullptr, 1, 1, 1, 0, -1, &h2));
    ASSERT_OK(ringfold_allgather_async(x, RINGFOLD_FLOAT32, s, 1, nullptr, 0, -1, &h3));
    for (int64_t h : {h1, h2, h3}) waitRelease(h);
    EXPECT_EQ(horovod_stop_timeline(), 1);
    horovod_shutdown();  // flushes the timeline
    const std::string trace = readFile(path);
    EXPECT_TRUE(contains(trace, "\"allreduce.noname.0\"")) << trace.substr(0, 2000);
    EXPECT_TRUE(contains(trace, "\"allreduce.noname.1\"")) << trace.substr(0, 2000);
    EXPECT_TRUE(contains(trace, "\"allgather.noname.0\"")) << trace.substr(0, 2000);
    EXPECT_FALSE(contains(trace, "allreduce.noname.2"));
  }
  std::filesystem::remove(path);
}

TEST_F(CApi, TimelineArguments) {
  init();
  EXPECT_EQ(horovod_start_timeline(nullptr, false), -3);
  EXPECT_TRUE(contains(lastError(), "file_name is NULL")) << lastError();
  EXPECT_EQ(horovod_start_timeline("", true), -3);
  const std::string path = tempPath("ringfold_c_api_timeline.json");
  EXPECT_EQ(horovod_start_timeline(path.c_str(), true), 1) << lastError();
  float x = 1;
  waitRelease(allreduce(&x, &x, RINGFOLD_FLOAT32, {}, "timeline.tensor", RINGFOLD_OP_SUM));
  EXPECT_EQ(horovod_stop_timeline(), 1);
  EXPECT_EQ(horovod_stop_timeline(), 1);  // already stopped: fine
  horovod_shutdown();
  EXPECT_TRUE(contains(readFile(path), "timeline.tensor"));
  std::filesystem::remove(path);
}

// ---- bad input ----------------------------------------------------------------------------------

TEST_F(CApi, BadArgumentsReturnInvalidArgumentNamingTheProblem) {
  init();
  float x[4] = {1, 2, 3, 4}, y[4];
  const int64_t s4[1] = {4};
  int64_t h = 12345;
  const int F = RINGFOLD_FLOAT32, CPU = RINGFOLD_CPU_DEVICE;
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, s4, 1, "n", 1, 1, 1, 0, CPU, nullptr), RINGFOLD_INVALID_ARGUMENT,
               "ringfold_allreduce_async: handle is NULL");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, 13, s4, 1, "n", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "unknown dtype code 13");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, -1, s4, 1, "n", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "unknown dtype code -1");
  const int64_t neg[2] = {2, -3};
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, neg, 2, "n", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "dimension 1 of shape [2, -3] is negative");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, s4, -1, "n", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "ndim is -1");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, s4, 1000, "n", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "ndim is 1000");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, nullptr, 2, "n", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "shape is NULL but ndim is 2");
  const int64_t huge[3] = {int64_t{1} << 40, int64_t{1} << 40, 16};
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, huge, 3, "n", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "is too large");
  EXPECT_FAILS(ringfold_allreduce_async(nullptr, y, F, s4, 1, "n", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "input is NULL");
  EXPECT_FAILS(ringfold_allreduce_async(x, nullptr, F, s4, 1, "n", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "output is NULL");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, RINGFOLD_BOOL, s4, 1, "n", 1, 1, 1, 0, CPU, &h),
               RINGFOLD_INVALID_ARGUMENT, "dtype bool cannot be reduced");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, s4, 1, "n", RINGFOLD_OP_ADASUM, 1, 1, 0, CPU, &h),
               RINGFOLD_INVALID_ARGUMENT, "ADASUM (2) is not supported");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, s4, 1, "n", 9, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "unknown reduce op code 9");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, s4, 1, "n", 1, 1, 1, 7, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "'n'", "unknown process set 7");
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, s4, 1, "", 1, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "needs a name");
  const std::string longName(5000, 'n');
  EXPECT_FAILS(ringfold_allreduce_async(x, y, F, s4, 1, longName.c_str(), 1, 1, 1, 0, CPU, &h),
               RINGFOLD_INVALID_ARGUMENT, "longer than");
  EXPECT_EQ(h, 12345);  // untouched by every failure

  EXPECT_FAILS(ringfold_allgather_async(nullptr, F, s4, 1, "n", 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "ringfold_allgather_async: input is NULL");
  EXPECT_FAILS(ringfold_allgather_async(x, 99, s4, 1, "n", 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT, "dtype code 99");
  EXPECT_FAILS(ringfold_broadcast_async(x, nullptr, F, s4, 1, 0, "n", 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "ringfold_broadcast_async: output is NULL");
  EXPECT_FAILS(ringfold_alltoall_async(x, F, s4, 1, nullptr, 2, "n", 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "nsplits is 2 but process set 0 has 1 rank");
  EXPECT_FAILS(ringfold_alltoall_async(x, F, s4, 1, nullptr, 1, "n", 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "splits is NULL but nsplits is 1");
  EXPECT_FAILS(ringfold_alltoall_async(x, F, s4, 1, nullptr, -1, "n", 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "nsplits is -1");
  EXPECT_FAILS(ringfold_reducescatter_async(x, RINGFOLD_BOOL, s4, 1, "n", 1, 1, 1, 0, CPU, &h),
               RINGFOLD_INVALID_ARGUMENT, "cannot be reduced");
  EXPECT_FAILS(ringfold_reducescatter_async(x, F, s4, 1, "n", 2, 1, 1, 0, CPU, &h), RINGFOLD_INVALID_ARGUMENT,
               "ADASUM");
  EXPECT_EQ(h, 12345);

  // Handles.
  EXPECT_EQ(ringfold_poll(12345), -RINGFOLD_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "unknown handle 12345")) << lastError();
  EXPECT_EQ(ringfold_poll(0), -RINGFOLD_INVALID_ARGUMENT);
  EXPECT_EQ(ringfold_poll(-7), -RINGFOLD_INVALID_ARGUMENT);
  EXPECT_FAILS(ringfold_wait(12345, 1.0), RINGFOLD_INVALID_ARGUMENT, "ringfold_wait: unknown handle 12345");
  EXPECT_FAILS(ringfold_release(int64_t{1} << 50), RINGFOLD_INVALID_ARGUMENT, "unknown handle");
  size_t bytes;
  EXPECT_FAILS(ringfold_result_bytes(12345, &bytes), RINGFOLD_INVALID_ARGUMENT, "unknown handle 12345");
  h = allreduce(x, y, F, {4}, "ok", RINGFOLD_OP_SUM);
  EXPECT_FAILS(ringfold_wait(h, std::nan("")), RINGFOLD_INVALID_ARGUMENT, "timeout_seconds is NaN");
  ASSERT_OK(ringfold_wait(h, kWait));
  EXPECT_FAILS(ringfold_result_bytes(h, nullptr), RINGFOLD_INVALID_ARGUMENT, "bytes is NULL");
  EXPECT_FAILS(ringfold_result_ndim(h, nullptr), RINGFOLD_INVALID_ARGUMENT, "ndim is NULL");
  EXPECT_FAILS(ringfold_result_data(h, nullptr), RINGFOLD_INVALID_ARGUMENT, "data is NULL");
  EXPECT_FAILS(ringfold_join_last_rank(h, nullptr), RINGFOLD_INVALID_ARGUMENT, "rank is NULL");
  EXPECT_OK(ringfold_release(h));
  EXPECT_OK(ringfold_wait(allreduce(x, y, F, {4}, "ok", RINGFOLD_OP_SUM), kWait));  // name reusable

  // A message from a previous failure does not linger.
  EXPECT_EQ(horovod_rank(), 0);
  EXPECT_EQ(lastError(), "");
}

TEST_F(CApi, ErrorMessagesAreThreadLocal) {
  init();
  float x = 0;
  int64_t h;
  EXPECT_EQ(ringfold_allreduce_async(&x, &x, 42, nullptr, 0, "n", 1, 1, 1, 0, -1, &h), RINGFOLD_INVALID_ARGUMENT);
  std::string other;
  std::thread([&] {
    other = lastError();
    EXPECT_EQ(ringfold_allreduce_async(&x, &x, RINGFOLD_FLOAT32, nullptr, 0, "n", 77, 1, 1, 0, -1, &h),
              RINGFOLD_INVALID_ARGUMENT);
  }).join();
  EXPECT_EQ(other, "");
  EXPECT_TRUE(contains(lastError(), "dtype code 42")) << lastError();
}

// ---- process sets -------------------------------------------------------------------------------

TEST_F(CApi, StaticProcessSetsAndNonDynamicMode) {
  const int psRanks[2] = {0, 0};
  const int psSizes[2] = {1, 1};
  ASSERT_TRUE(horovod_init(nullptr, 0, psRanks, psSizes, 2)) << lastError();
  EXPECT_EQ(horovod_number_of_process_sets(), 3);
  int ids[3] = {};
  horovod_process_set_ids(ids);
  EXPECT_EQ(std::vector<int>(ids, ids + 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(horovod_process_set_rank(1), 0);
  EXPECT_EQ(horovod_process_set_size(2), 1);
  EXPECT_EQ(horovod_process_set_included(2), 1);
  int ranks[1] = {-1};
  EXPECT_EQ(horovod_process_set_ranks(1, ranks), 0);
  EXPECT_EQ(ranks[0], 0);
  EXPECT_EQ(horovod_process_set_ranks(1, nullptr), RINGFOLD_PROCESS_SET_ERROR_INVALID);
  EXPECT_EQ(horovod_process_set_rank(9), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
  EXPECT_TRUE(contains(lastError(), "unknown process set 9")) << lastError();
  EXPECT_EQ(horovod_process_set_size(9), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
  EXPECT_EQ(horovod_process_set_included(-3), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
  EXPECT_EQ(horovod_process_set_ranks(9, ranks), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
  horovod_process_set_ids(nullptr);
  EXPECT_TRUE(contains(lastError(), "ids is NULL")) << lastError();

  float x[2] = {1, 2}, y[2] = {};
  waitRelease(allreduce(x, y, RINGFOLD_FLOAT32, {2}, "in.set.2", RINGFOLD_OP_SUM, 1, 1, 2));
  EXPECT_EQ(y[1], 2.0f);

  const int r0 = 0;
  EXPECT_EQ(horovod_add_process_set(&r0, 1), HOROVOD_PROCESS_SET_ERROR_DYNAMIC);
  EXPECT_TRUE(contains(lastError(), "RINGFOLD_DYNAMIC_PROCESS_SETS")) << lastError();
  EXPECT_EQ(horovod_remove_process_set(1), HOROVOD_PROCESS_SET_ERROR_DYNAMIC);
}

TEST_F(CApi, DynamicProcessSetErrors) {
  setenv("RINGFOLD_DYNAMIC_PROCESS_SETS", "1", 1);
  init();
  const int r0 = 0, r1 = 1, dup[2] = {0, 0};
  // With one rank the only possible set is the global one.
  EXPECT_EQ(horovod_add_process_set(&r0, 1), HOROVOD_PROCESS_SET_ERROR_EXISTING_SET);
  EXPECT_TRUE(contains(lastError(), "process set 0 already has ranks [0]")) << lastError();
  EXPECT_EQ(horovod_add_process_set(nullptr, 0), HOROVOD_PROCESS_SET_ERROR_EXISTING_SET);
  EXPECT_EQ(horovod_add_process_set(&r1, 1), RINGFOLD_PROCESS_SET_ERROR_INVALID);
  EXPECT_TRUE(contains(lastError(), "rank 1 is out of range [0, 1)")) << lastError();
  // Two ranks cannot be distinct ranks of a world of one: the count is refused before the array
  // is read (multi-rank worlds report "appears twice": c_worker.cc's dynamic sets).
  EXPECT_EQ(horovod_add_process_set(dup, 2), RINGFOLD_PROCESS_SET_ERROR_INVALID);
  EXPECT_TRUE(contains(lastError(), "nranks is 2 but the world has 1 rank")) << lastError();
  EXPECT_EQ(horovod_remove_process_set(0), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
  EXPECT_TRUE(contains(lastError(), "global process set (id 0) cannot be removed")) << lastError();
  EXPECT_EQ(horovod_remove_process_set(4), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
  EXPECT_EQ(horovod_number_of_process_sets(), 1);
}

TEST_F(CApi, StaticSetCanBeRemovedInDynamicMode) {
  setenv("RINGFOLD_DYNAMIC_PROCESS_SETS", "1", 1);
  const int psRanks[1] = {0}, psSizes[1] = {1};
  ASSERT_TRUE(horovod_init(nullptr, 0, psRanks, psSizes, 1)) << lastError();
  EXPECT_EQ(horovod_remove_process_set(1), 1) << lastError();
  EXPECT_EQ(horovod_number_of_process_sets(), 1);
  EXPECT_EQ(horovod_process_set_size(1), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
  float x = 1;
  int64_t h;
  EXPECT_FAILS(ringfold_allreduce_async(&x, &x, RINGFOLD_FLOAT32, nullptr, 0, "gone", 1, 1, 1, 1, -1, &h),
               RINGFOLD_INVALID_ARGUMENT, "unknown process set 1");
  EXPECT_EQ(horovod_remove_process_set(1), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
}

// ---- threads --------------------------------------------------------------------------------------

TEST_F(CApi, ConcurrentEnqueueFromManyThreads) {
  init();
  constexpr int kThreads = 8, kOps = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < kOps; ++i) {
        float x[3] = {float(t), float(i), 1.0f}, y[3] = {};
        const std::string name = "thread." + std::to_string(t) + "." + std::to_string(i);
        const int64_t s[1] = {3};
        int64_t h = -1;
        const int named = ringfold_allreduce_async(x, y, RINGFOLD_FLOAT32, s, 1, i % 2 ? name.c_str() : nullptr,
                                                   RINGFOLD_OP_SUM, 1, 2, 0, -1, &h);
        if (named != RINGFOLD_OK || ringfold_wait(h, kWait) != RINGFOLD_OK || y[0] != 2.0f * t || y[1] != 2.0f * i ||
            ringfold_release(h) != RINGFOLD_OK) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// Init and shutdown racing with enqueues, waits and queries on other threads: every call returns
// a defined status (no crash, no hang), and the library ends usable.
TEST_F(CApi, LifecycleRacesWithCallsOnOtherThreads) {
  std::atomic<bool> stop{false};
  std::atomic<int> unexpected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &stop, &unexpected] {
      for (int i = 0; !stop.load(); ++i) {
        float x[2] = {1, 2};
        int64_t h = -1;
        const std::string name = "race." + std::to_string(t) + "." + std::to_string(i);
        const int64_t s[1] = {2};
        int rc = ringfold_allreduce_async(x, x, RINGFOLD_FLOAT32, s, 1, name.c_str(), 1, 1, 1, 0, -1, &h);
        if (rc == RINGFOLD_OK) {
          rc = ringfold_wait(h, kWait);
          // OK, or shut down under it, or its generation already gone.
          if (rc != RINGFOLD_OK && rc != RINGFOLD_PRECONDITION_ERROR && rc != RINGFOLD_INVALID_ARGUMENT) ++unexpected;
          ringfold_release(h);
        } else if (rc != RINGFOLD_PRECONDITION_ERROR) {
          ++unexpected;
        }
        const int size = horovod_size();
        if (size != 1 && size != -1) ++unexpected;
      }
    });
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_OK(ringfold_init(nullptr, 0, nullptr, nullptr, 0));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_OK(ringfold_shutdown());
  }
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(unexpected.load(), 0);
  init();
  float x = 3;
  waitRelease(allreduce(&x, &x, RINGFOLD_FLOAT32, {}, "after.races", RINGFOLD_OP_SUM));
}

// ---- counts checked before caller arrays are read -------------------------------------------------

// `values` placed at the very end of a readable page followed by an inaccessible one: reading one
// element past them faults at once, so a call that trusts a count larger than the array crashes
// deterministically instead of reading garbage. Never freed (used in forked children).
template <typename T>
const T* guarded(std::vector<T> values) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = values.size() * sizeof(T);
  auto* base = static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (base == MAP_FAILED || bytes > page) std::abort();
  mprotect(base + page, page, PROT_NONE);
  T* at = reinterpret_cast<T*>(base + page - bytes);
  std::memcpy(at, values.data(), bytes);
  return at;
}

// Runs `body` in a forked child (so that a crash fails this test instead of ending the suite);
// returns "<what body returned>" when the child exited normally, else how it died.
std::string inChild(const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(30);
    const std::string out = body();
    (void)!write(fds[1], out.data(), out.size());
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "the call crashed the process with signal " + std::to_string(WTERMSIG(status));
  return out;
}

// "<status> <message>" of a call.
std::string outcome(int rc) { return std::to_string(rc) + " " + lastError(); }
const std::string kInvalid = std::to_string(RINGFOLD_INVALID_ARGUMENT) + " ";

// horovod_init's counts are checked against the world size (1 here) before ps_ranks or ranks is
// read: ps_sizes larger than the world, or an nranks that cannot be the world, used to read
// past the caller's arrays (a segmentation fault).
TEST_F(CApi, InitCountsAreCheckedBeforeReadingArrays) {
  const std::string hugeSet = inChild([] {
    return outcome(ringfold_init(nullptr, 0, guarded<int>({0}), guarded<int>({1000000}), 1));
  });
  EXPECT_EQ(hugeSet.rfind(kInvalid, 0), 0u) << hugeSet;
  EXPECT_TRUE(contains(hugeSet, "ps_sizes[0] is 1000000")) << hugeSet;
  EXPECT_TRUE(contains(hugeSet, "1 rank")) << hugeSet;
  const std::string twoOfOne = inChild([] {
    return outcome(ringfold_init(nullptr, 0, guarded<int>({0, 0}), guarded<int>({1, 2}), 2));
  });
  EXPECT_TRUE(contains(twoOfOne, "ps_sizes[1] is 2")) << twoOfOne;
  const std::string hugeWorld = inChild([] {
    return outcome(horovod_init(guarded<int>({0}), 1000000, nullptr, nullptr, 0) ? RINGFOLD_OK : RINGFOLD_INVALID_ARGUMENT);
  });
  EXPECT_EQ(hugeWorld.rfind(kInvalid, 0), 0u) << hugeWorld;
  EXPECT_TRUE(contains(hugeWorld, "nranks is 1000000")) << hugeWorld;
  EXPECT_TRUE(contains(hugeWorld, "world has 1 rank")) << hugeWorld;
}

// ringfold_alltoall_async: nsplits is checked against the process set's size before splits is
// read (nsplits 1000000 used to crash), each split against the first dimension, and the sum with
// checked arithmetic; each message names the argument. The same through ringfold_enqueue.
TEST_F(CApi, AlltoallSplitsAreCheckedBeforeAndWhileReading) {
  auto call = [](std::vector<int64_t> splits, int nsplits) {
    return inChild([=] {
      if (!horovod_init(nullptr, 0, nullptr, nullptr, 0)) return std::string("init failed: ") + lastError();
      static float x[4] = {1, 2, 3, 4};
      const int64_t s4[1] = {4};
      int64_t h = -1;
      const std::string direct = outcome(ringfold_alltoall_async(x, RINGFOLD_FLOAT32, s4, 1, guarded(splits), nsplits,
                                                                 "a2a", 0, RINGFOLD_CPU_DEVICE, &h));
      ringfold_op_t op{};
      op.type = RINGFOLD_ALLTOALL;
      op.name = "a2a.enqueue";
      op.splits = guarded(splits);
      op.nsplits = nsplits;
      ringfold_tensor_t in{};
      in.data = x;
      in.dtype = RINGFOLD_FLOAT32;
      in.shape = s4;
      in.ndim = 1;
      in.device = RINGFOLD_CPU_DEVICE;
      const std::string viaEnqueue = outcome(ringfold_enqueue(&op, &in, nullptr, &h));
      horovod_shutdown();
      return direct == viaEnqueue ? direct : direct + " | enqueue: " + viaEnqueue;
    });
  };
  const std::string many = call({4}, 1000000);
  EXPECT_EQ(many.rfind(kInvalid, 0), 0u) << many;
  EXPECT_TRUE(contains(many, "nsplits is 1000000")) << many;
  EXPECT_TRUE(contains(many, "process set 0 has 1 rank")) << many;
  const std::string huge = call({INT64_MAX}, 1);
  EXPECT_EQ(huge.rfind(kInvalid, 0), 0u) << huge;
  EXPECT_TRUE(contains(huge, "splits add up to more than the first dimension 4: splits[0] alone is "
                             "9223372036854775807")) << huge;
  const std::string negative = call({-1}, 1);
  EXPECT_TRUE(contains(negative, "splits[0] is -1")) << negative;
  EXPECT_EQ(call({4}, 1), "0 ");  // a valid one is enqueued
}

// horovod_add_process_set checks nranks against the world size before reading ranks.
TEST_F(CApi, AddProcessSetCountIsCheckedBeforeReadingRanks) {
  const std::string got = inChild([] {
    setenv("RINGFOLD_DYNAMIC_PROCESS_SETS", "1", 1);
    if (!horovod_init(nullptr, 0, nullptr, nullptr, 0)) return std::string("init failed: ") + lastError();
    const int rc = horovod_add_process_set(guarded<int>({0}), 1000000);
    const std::string out = std::to_string(rc) + " " + lastError();
    horovod_shutdown();
    return out;
  });
  EXPECT_EQ(got.rfind(std::to_string(RINGFOLD_PROCESS_SET_ERROR_INVALID) + " ", 0), 0u) << got;
  EXPECT_TRUE(contains(got, "nranks is 1000000")) << got;
  EXPECT_TRUE(contains(got, "1 rank")) << got;
}

// ---- fork ---------------------------------------------------------------------------------------

// A fork()ed child does not inherit a usable engine: calls fail cleanly, and its exit (which runs
// the library's static destructor) neither hangs nor crashes.
TEST_F(CApi, ForkedChildSeesNotInitialized) {
  init();
  // Fork from an idle engine, as a data loader does between steps. Its first cycles allocate,
  // and the sanitizers' allocators (Clang 14's, which build-asan uses) have no fork handlers: a
  // fork that lands while another thread holds one of their locks leaves the child's malloc
  // locked for good. An idle engine allocates nothing (ProcessSet::readiness_), so one
  // operation and a few idle cycles first make that a non-event.
  float warm = 1;
  waitRelease(allreduce(&warm, &warm, RINGFOLD_FLOAT32, {}, "parent.before.fork", RINGFOLD_OP_SUM));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    gForkedChild = true;
    alarm(20);
    int bad = 0;
    if (horovod_is_initialized() != 0) bad |= 1;
    if (horovod_rank() != -1 || !contains(lastError(), "fork")) bad |= 2;
    float x = 1;
    int64_t h;
    if (ringfold_allreduce_async(&x, &x, RINGFOLD_FLOAT32, nullptr, 0, "child", 1, 1, 1, 0, -1, &h) !=
        RINGFOLD_PRECONDITION_ERROR) {
      bad |= 4;
    }
    horovod_shutdown();  // abandons the parent's copy without joining it
    std::exit(bad);      // static destructors run
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent's engine is untouched.
  float x = 5;
  waitRelease(allreduce(&x, &x, RINGFOLD_FLOAT32, {}, "parent.after.fork", RINGFOLD_OP_SUM));
  EXPECT_EQ(x, 5.0f);
}

// ---- the exported symbols ------------------------------------------------------------------------

// Every function declared RINGFOLD_API in the header can be found with dlsym, as ctypes does.
TEST(CApiSymbols, EveryHeaderFunctionIsExported) {
  const std::string header = readFile(std::string(RINGFOLD_SOURCE_DIR) + "/bindings/c/ringfold.h");
  ASSERT_FALSE(header.empty());
  void* lib = dlopen(RINGFOLD_LIBRARY_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen(RINGFOLD_LIBRARY_PATH, RTLD_NOW);
  ASSERT_NE(lib, nullptr) << dlerror();
  const std::regex decl(R"(^RINGFOLD_API [^(]*?\b(\w+)\()");
  int found = 0;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, decl)) continue;
    const std::string name = m[1];
    EXPECT_TRUE(name.rfind("horovod_", 0) == 0 || name.rfind("ringfold_", 0) == 0) << name;
    EXPECT_NE(dlsym(lib, name.c_str()), nullptr) << name;
    ++found;
  }
  EXPECT_GE(found, 55);
  dlclose(lib);
}

}  // namespace
