// One rank of a multi-process C ABI test, started by ringfoldrun (see c_multiprocess_test.cc):
//
//   ringfoldrun -np 3 bindings_c_worker <scenario> [<dir>]
//
// It uses nothing but bindings/c/ringfold.h; what it prints (FAIL / MSG / DONE lines) and its
// bounded waits are worker.h's.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/ringfold.h"
#include "tests/bindings/worker.h"

namespace {

using namespace rftest;

bool init(const std::vector<std::vector<int>>& sets = {}) {
  std::vector<int> ranks, sizes;
  for (const auto& s : sets) {
    ranks.insert(ranks.end(), s.begin(), s.end());
    sizes.push_back(static_cast<int>(s.size()));
  }
  if (!horovod_init(nullptr, 0, ranks.data(), sizes.data(), static_cast<int>(sets.size()))) {
    fail(__LINE__, err());
    return false;
  }
  gRank = horovod_rank();
  return true;
}

// ---- scenarios ----------------------------------------------------------------------------------

void collectives() {
  if (!init()) return;
  const int r = gRank, n = horovod_size();
  CHECK_EQ(n, 3);
  CHECK_EQ(horovod_local_rank(), r);
  CHECK_EQ(horovod_local_size(), 3);
  CHECK_EQ(horovod_cross_rank(), 0);
  CHECK_EQ(horovod_cross_size(), 1);
  CHECK(horovod_is_homogeneous(), "");

  // Allreduce: sum with scales, average, min, max, product; 1001 elements (odd, not a multiple of 3).
  constexpr int kN = 1001;
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) x[i] = static_cast<float>((r + 1) * (i % 17));
  CHECK_OK(finish(allreduce(x.data(), y.data(), RINGFOLD_FLOAT32, {kN}, "ar.sum", RINGFOLD_OP_SUM, 2.0, 0.5)));
  for (int i = 0; i < kN; ++i) {
    if (y[i] != 6.0f * (i % 17)) {
      fail(__LINE__, "ar.sum[" + std::to_string(i) + "] = " + std::to_string(y[i]));
      break;
    }
  }
  std::vector<double> d(kN);
  for (int i = 0; i < kN; ++i) d[i] = r * static_cast<double>(i);
  CHECK_OK(finish(allreduce(d.data(), d.data(), RINGFOLD_FLOAT64, {7, 143}, "ar.avg", RINGFOLD_OP_AVERAGE, 3.0, 0.5)));
  CHECK(d[10] == 15.0 && d[kN - 1] == 1.5 * (kN - 1), std::to_string(d[10]));
  std::vector<int32_t> m(5), mn(5), mx(5);
  for (int i = 0; i < 5; ++i) m[i] = (r - 1) * i;
  CHECK_OK(finish(allreduce(m.data(), mn.data(), RINGFOLD_INT32, {5}, "ar.min", RINGFOLD_OP_MIN)));
  CHECK_OK(finish(allreduce(m.data(), mx.data(), RINGFOLD_INT32, {5}, "ar.max", RINGFOLD_OP_MAX)));
  CHECK(mn[4] == -4 && mx[4] == 4, std::to_string(mn[4]) + " " + std::to_string(mx[4]));
  float p = static_cast<float>(r + 1);
  CHECK_OK(finish(allreduce(&p, &p, RINGFOLD_FLOAT32, {}, "ar.prod", RINGFOLD_OP_PRODUCT)));
  CHECK(p == 6.0f, std::to_string(p));

  // Grouped allreduce.
  {
    float a[2] = {1.0f * r, 2.0f}, ao[2];
    int64_t b[3] = {r, r, 1}, bo[3];
    const void* in[2] = {a, b};
    void* out[2] = {ao, bo};
    const int dtypes[2] = {RINGFOLD_FLOAT32, RINGFOLD_INT64}, ndims[2] = {1, 1};
    const int64_t sa[1] = {2}, sb[1] = {3};
    const int64_t* shapes[2] = {sa, sb};
    const char* names[2] = {"group.a", "group.b"};
    int64_t hs[2];
    CHECK_OK(ringfold_grouped_allreduce_async(2, in, out, dtypes, shapes, ndims, names, RINGFOLD_OP_SUM, 1, 1, 0, -1,
                                              hs));
    CHECK_OK(finish(hs[0]));
    CHECK_OK(finish(hs[1]));
    CHECK(ao[0] == 3.0f && ao[1] == 6.0f && bo[0] == 3 && bo[2] == 3, "grouped");
  }

  // Allgather: rank r gives r + 1 rows of 2 int64s (100 r + k).
  {
    std::vector<int64_t> rows(2 * (r + 1));
    for (size_t k = 0; k < rows.size(); ++k) rows[k] = 100 * r + static_cast<int64_t>(k);
    const int64_t shape[2] = {r + 1, 2};
    int64_t h;
    CHECK_OK(ringfold_allgather_async(rows.data(), RINGFOLD_INT64, shape, 2, "ag", 0, -1, &h));
    CHECK_OK(ringfold_wait(h, kWait));
    std::vector<int64_t> s;
    const auto got = result<int64_t>(h, &s);
    CHECK(s == (std::vector<int64_t>{6, 2}), "allgather shape");
    std::vector<int64_t> want;
    for (int q = 0; q < 3; ++q) {
      for (int k = 0; k < 2 * (q + 1); ++k) want.push_back(100 * q + k);
    }
    CHECK(got == want, "allgather data");
    CHECK_OK(ringfold_release(h));
  }

  // Broadcast from root 1 into a separate output.
  {
    std::vector<double> in(100, -1.0), out(100, 0.0);
    if (r == 1) {
      for (int i = 0; i < 100; ++i) in[i] = 1.5 * i;
    }
    const int64_t shape[1] = {100};
    int64_t h;
    CHECK_OK(ringfold_broadcast_async(in.data(), out.data(), RINGFOLD_FLOAT64, shape, 1, 1, "bc", 0, -1, &h));
    CHECK_OK(finish(h));
    CHECK(out[99] == 148.5 && out[0] == 0.0, std::to_string(out[99]));
  }

  // Reduce (max) to root 2 through ringfold_enqueue: only the root's output is written.
  {
    std::vector<int64_t> in(1000), out(1000, -7);
    for (int i = 0; i < 1000; ++i) in[i] = (i % 3 == r) ? 1000 + i : i;
    const int64_t shape[1] = {1000};
    ringfold_tensor_t tin = {in.data(), RINGFOLD_INT64, shape, 1, RINGFOLD_CPU_DEVICE, nullptr};
    ringfold_tensor_t tout = {out.data(), RINGFOLD_INT64, shape, 1, RINGFOLD_CPU_DEVICE, nullptr};
    ringfold_op_t op = {};
    op.type = RINGFOLD_REDUCE;
    op.name = "reduce.max";
    op.reduce_op = RINGFOLD_OP_MAX;
    op.root = 2;
    int64_t h;
    CHECK_OK(ringfold_enqueue(&op, &tin, &tout, &h));
    CHECK_OK(finish(h));
    for (int i = 0; i < 1000; ++i) {
      const int64_t want = r == 2 ? 1000 + i : -7;
      CHECK(out[i] == want, "reduce element " + std::to_string(i) + ": " + std::to_string(out[i]));
    }
  }

  // Alltoall: rank r sends r + j + 1 rows of 3 int32s to rank j.
  {
    std::vector<int64_t> splits(3);
    std::vector<int32_t> data;
    for (int j = 0; j < 3; ++j) {
      splits[j] = r + j + 1;
      for (int row = 0; row < splits[j]; ++row) {
        for (int k = 0; k < 3; ++k) data.push_back(r * 10000 + j * 100 + row * 10 + k);
      }
    }
    const int64_t shape[2] = {static_cast<int64_t>(data.size() / 3), 3};
    int64_t h;
    CHECK_OK(ringfold_alltoall_async(data.data(), RINGFOLD_INT32, shape, 2, splits.data(), 3, "a2a", 0, -1, &h));
    CHECK_OK(ringfold_wait(h, kWait));
    std::vector<int64_t> s;
    const auto got = result<int32_t>(h, &s);
    std::vector<int32_t> want;
    for (int q = 0; q < 3; ++q) {
      for (int row = 0; row < q + r + 1; ++row) {
        for (int k = 0; k < 3; ++k) want.push_back(q * 10000 + r * 100 + row * 10 + k);
      }
    }
    CHECK(got == want, "alltoall data");
    CHECK(s == (std::vector<int64_t>{3 * r + 6, 3}), "alltoall shape");
    int64_t received[3] = {};
    CHECK_OK(ringfold_result_received_splits(h, received, 3));
    CHECK(received[0] == r + 1 && received[1] == r + 2 && received[2] == r + 3, "received splits");
    CHECK_OK(ringfold_release(h));
    // Equal splits.
    const int32_t six[6] = {r, r, r, r, r, r};
    const int64_t s6[1] = {6};
    CHECK_OK(ringfold_alltoall_async(six, RINGFOLD_INT32, s6, 1, nullptr, 0, "a2a.equal", 0, -1, &h));
    CHECK_OK(ringfold_wait(h, kWait));
    CHECK(result<int32_t>(h) == (std::vector<int32_t>{0, 0, 1, 1, 2, 2}), "alltoall equal");
    CHECK_OK(ringfold_release(h));
  }

  // Reducescatter of [7, 3]: rows 3, 2, 2.
  {
    std::vector<float> in(21);
    for (int i = 0; i < 21; ++i) in[i] = static_cast<float>((r + 1) * i);
    const int64_t shape[2] = {7, 3};
    int64_t h;
    CHECK_OK(ringfold_reducescatter_async(in.data(), RINGFOLD_FLOAT32, shape, 2, "rs", RINGFOLD_OP_SUM, 1, 1, 0, -1,
                                          &h));
    CHECK_OK(ringfold_wait(h, kWait));
    std::vector<int64_t> s;
    const auto got = result<float>(h, &s);
    const int first = r == 0 ? 0 : r == 1 ? 3 : 5, rows = r == 0 ? 3 : 2;
    CHECK(s == (std::vector<int64_t>{rows, 3}), "reducescatter shape");
    std::vector<float> want;
    for (int i = first * 3; i < (first + rows) * 3; ++i) want.push_back(6.0f * i);
    CHECK(got == want, "reducescatter data");
    CHECK_OK(ringfold_release(h));
    CHECK_OK(ringfold_reducescatter_async(in.data(), RINGFOLD_FLOAT32, shape, 2, "rs.avg", RINGFOLD_OP_AVERAGE, 3.0,
                                          0.5, 0, -1, &h));
    CHECK_OK(ringfold_wait(h, kWait));
    const auto avg = result<float>(h);
    CHECK(!avg.empty() && avg[0] == 3.0f * first * 3, "reducescatter avg");
    CHECK_OK(ringfold_release(h));
  }

  int64_t h;
  CHECK_OK(ringfold_barrier_async(0, &h));
  CHECK_OK(finish(h));

  // Unnamed tensors: the same per-op counters on every rank, so they match.
  for (int i = 0; i < 3; ++i) {
    float v = 1.0f;
    const int64_t s1[1] = {1};
    CHECK_OK(ringfold_allreduce_async(&v, &v, RINGFOLD_FLOAT32, s1, 1, nullptr, RINGFOLD_OP_SUM, 1, 1, 0, -1, &h));
    CHECK_OK(finish(h));
    CHECK(v == 3.0f, "unnamed");
  }

  // Many threads enqueueing at once.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, r] {
      for (int i = 0; i < 20; ++i) {
        float v[2] = {static_cast<float>(r), static_cast<float>(t * i)};
        const std::string name = "mt." + std::to_string(t) + "." + std::to_string(i);
        CHECK_OK(finish(allreduce(v, v, RINGFOLD_FLOAT32, {2}, name.c_str(), RINGFOLD_OP_SUM)));
        CHECK(v[0] == 3.0f && v[1] == 3.0f * t * i, name);
      }
    });
  }
  for (auto& t : threads) t.join();

  // A handle whose peers have not submitted yet: the wait times out (IN_PROGRESS) and it cannot
  // be released. Ranks 1 and 2 submit "late" only after a barrier that waits for rank 0.
  {
    float v = 1.0f;
    int64_t late = -1, b = -1;
    if (r == 0) {
      late = allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "late", RINGFOLD_OP_SUM);
      CHECK_EQ(ringfold_poll(late), 0);
      CHECK_EQ(ringfold_wait(late, 0.3), RINGFOLD_IN_PROGRESS);
      CHECK(contains(err(), "did not complete within 0.3 s"), err());
      CHECK_EQ(ringfold_release(late), RINGFOLD_PRECONDITION_ERROR);
      CHECK(contains(err(), "has not completed"), err());
      int ndim;
      CHECK_EQ(ringfold_result_ndim(late, &ndim), RINGFOLD_PRECONDITION_ERROR);
      CHECK(contains(err(), "has not completed yet"), err());
      CHECK_OK(ringfold_barrier_async(0, &b));
      CHECK_OK(finish(b));
    } else {
      CHECK_OK(ringfold_barrier_async(0, &b));
      CHECK_OK(finish(b));
      late = allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "late", RINGFOLD_OP_SUM);
    }
    CHECK_OK(finish(late));
    CHECK(v == 3.0f, "late");
  }

  // Disagreements: the same error on every rank, naming the tensor and the ranks.
  std::string why;
  {
    std::vector<float> v(r + 2, 1.0f);
    CHECK_EQ(finish(allreduce(v.data(), v.data(), RINGFOLD_FLOAT32, {r + 2}, "mismatch.shape", RINGFOLD_OP_SUM), &why),
             RINGFOLD_PRECONDITION_ERROR);
    message("shape", why);
    float f = 1.0f;
    int32_t i32 = 1;
    const int64_t id = r == 2 ? allreduce(&i32, &i32, RINGFOLD_INT32, {}, "mismatch.dtype", RINGFOLD_OP_SUM)
                              : allreduce(&f, &f, RINGFOLD_FLOAT32, {}, "mismatch.dtype", RINGFOLD_OP_SUM);
    CHECK_EQ(finish(id, &why), RINGFOLD_PRECONDITION_ERROR);
    message("dtype", why);
    const int64_t s1[1] = {1};
    CHECK_OK(ringfold_broadcast_async(&f, &f, RINGFOLD_FLOAT32, s1, 1, 5, "bad.root", 0, -1, &h));
    CHECK_EQ(finish(h, &why), RINGFOLD_PRECONDITION_ERROR);
    message("root", why);
    const int32_t six[6] = {};
    const int64_t s6[1] = {6}, good[3] = {2, 2, 2}, bad[3] = {1, 1, 1};
    CHECK_OK(ringfold_alltoall_async(six, RINGFOLD_INT32, s6, 1, r == 1 ? bad : good, 3, "bad.splits", 0, -1, &h));
    CHECK_EQ(finish(h, &why), RINGFOLD_PRECONDITION_ERROR);
    message("splits", why);
  }
  // Still usable afterwards.
  float ok = 1.0f;
  CHECK_OK(finish(allreduce(&ok, &ok, RINGFOLD_FLOAT32, {}, "after.mismatch", RINGFOLD_OP_SUM)));
  CHECK(ok == 3.0f, "after mismatch");
  horovod_shutdown();
}

void staticSets() {
  if (!init({{0, 1}, {1, 2}})) return;
  const int r = gRank;
  CHECK_EQ(horovod_number_of_process_sets(), 3);
  CHECK_EQ(horovod_process_set_size(1), 2);
  CHECK_EQ(horovod_process_set_size(2), 2);
  CHECK_EQ(horovod_process_set_rank(1), r == 2 ? HOROVOD_PROCESS_SET_ERROR_FOREIGN_SET : r);
  CHECK_EQ(horovod_process_set_rank(2), r == 0 ? HOROVOD_PROCESS_SET_ERROR_FOREIGN_SET : r - 1);
  CHECK_EQ(horovod_process_set_included(1), r == 2 ? 0 : 1);
  CHECK_EQ(horovod_process_set_included(2), r == 0 ? 0 : 1);
  int ranks[2] = {-1, -1};
  CHECK_EQ(horovod_process_set_ranks(2, ranks), 0);
  CHECK(ranks[0] == 1 && ranks[1] == 2, "ranks of set 2");
  const int zero = 0;
  CHECK_EQ(horovod_add_process_set(&zero, 1), HOROVOD_PROCESS_SET_ERROR_DYNAMIC);

  float a = static_cast<float>(r + 1), b = a;
  int64_t ha = -1, hb = -1;
  if (r != 2) ha = allreduce(&a, &a, RINGFOLD_FLOAT32, {}, "in.set", RINGFOLD_OP_SUM, 1, 1, 1);
  if (r != 0) hb = allreduce(&b, &b, RINGFOLD_FLOAT32, {}, "in.set", RINGFOLD_OP_SUM, 1, 1, 2);  // same name, other set
  if (ha > 0) CHECK_OK(finish(ha));
  if (hb > 0) CHECK_OK(finish(hb));
  if (r != 2) CHECK(a == 3.0f, std::to_string(a));
  if (r != 0) CHECK(b == 5.0f, std::to_string(b));
  if (r == 2) {
    int64_t h;
    const int64_t s1[1] = {1};
    CHECK_EQ(ringfold_allreduce_async(&a, &a, RINGFOLD_FLOAT32, s1, 1, "foreign", 1, 1, 1, 1, -1, &h),
             RINGFOLD_INVALID_ARGUMENT);
    CHECK(contains(err(), "rank 2 is not in process set 1"), err());
  }
  if (r != 0) {
    // Broadcast in set 2 from its rank 1 (global rank 2); allgather in set 2.
    double v = r == 2 ? 42.0 : 0.0;
    int64_t h;
    const int64_t s1[1] = {1};
    CHECK_OK(ringfold_broadcast_async(&v, &v, RINGFOLD_FLOAT64, s1, 1, 1, "set.bc", 2, -1, &h));
    CHECK_OK(finish(h));
    CHECK(v == 42.0, std::to_string(v));
    int32_t mine = r * 7;
    CHECK_OK(ringfold_allgather_async(&mine, RINGFOLD_INT32, s1, 1, nullptr, 2, -1, &h));
    CHECK_OK(ringfold_wait(h, kWait));
    CHECK(result<int32_t>(h) == (std::vector<int32_t>{7, 14}), "set allgather");
    CHECK_OK(ringfold_release(h));
  }
  int64_t h;
  CHECK_OK(ringfold_barrier_async(0, &h));
  CHECK_OK(finish(h));
  horovod_shutdown();
}

void dynamicSets() {
  if (!init()) return;
  const int r = gRank;
  const int s02[2] = {2, 0}, s012[3] = {0, 1, 2}, s05[2] = {0, 5}, s1[1] = {1};
  const int id = horovod_add_process_set(s02, 2);
  CHECK(id > 0, std::to_string(id) + ": " + err());
  CHECK_EQ(horovod_add_process_set(s02, 2), HOROVOD_PROCESS_SET_ERROR_EXISTING_SET);
  CHECK_EQ(horovod_add_process_set(s012, 3), HOROVOD_PROCESS_SET_ERROR_EXISTING_SET);
  CHECK_EQ(horovod_add_process_set(s05, 2), RINGFOLD_PROCESS_SET_ERROR_INVALID);
  CHECK(contains(err(), "rank 5 is out of range"), err());
  const int twice[2] = {1, 1};
  CHECK_EQ(horovod_add_process_set(twice, 2), RINGFOLD_PROCESS_SET_ERROR_INVALID);
  CHECK(contains(err(), "appears twice"), err());
  CHECK_EQ(horovod_number_of_process_sets(), 2);
  CHECK_EQ(horovod_process_set_size(id), 2);
  CHECK_EQ(horovod_process_set_rank(id), r == 1 ? HOROVOD_PROCESS_SET_ERROR_FOREIGN_SET : r / 2);
  float v = static_cast<float>(r + 1);
  if (r != 1) {
    CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "dyn", RINGFOLD_OP_SUM, 1, 1, id)));
    CHECK(v == 4.0f, std::to_string(v));
  }
  const int solo = horovod_add_process_set(s1, 1);
  CHECK(solo > id, std::to_string(solo) + ": " + err());
  if (r == 1) {
    CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "dyn.solo", RINGFOLD_OP_SUM, 1, 1, solo)));
    CHECK(v == 2.0f, std::to_string(v));
  }
  CHECK_EQ(horovod_remove_process_set(id), id);
  CHECK_EQ(horovod_number_of_process_sets(), 2);
  CHECK_EQ(horovod_process_set_size(id), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
  CHECK_EQ(horovod_remove_process_set(id), HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET);
  int64_t h;
  const int64_t one[1] = {1};
  CHECK_EQ(ringfold_allreduce_async(&v, &v, RINGFOLD_FLOAT32, one, 1, "gone", 1, 1, 1, id, -1, &h),
           RINGFOLD_INVALID_ARGUMENT);
  CHECK(contains(err(), "unknown process set"), err());
  // The same ranks again: a new set.
  const int again = horovod_add_process_set(s02, 2);
  CHECK(again > solo, std::to_string(again) + ": " + err());
  if (r != 1) {
    v = 1.0f;
    CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "dyn", RINGFOLD_OP_SUM, 1, 1, again)));
    CHECK(v == 2.0f, std::to_string(v));
  }
  CHECK_EQ(horovod_remove_process_set(solo), solo);
  CHECK_EQ(horovod_remove_process_set(again), again);
  CHECK_EQ(horovod_number_of_process_sets(), 1);
  horovod_shutdown();
}

// ringfold_cancel on an allreduce only rank 0 submitted, after the engine reported it (the
// other ranks will never match it): it completes with ABORTED "cancelled" (it used to stay
// pending for good), and the name is free again; an allreduce that ran is not changed by a late
// cancel.
void cancel() {
  if (!init()) return;
  float one[4] = {1, 1, 1, 1}, out[4] = {0, 0, 0, 0};
  if (gRank == 0) {
    const int64_t h = allreduce(one, out, RINGFOLD_FLOAT32, {4}, "lonely.c", RINGFOLD_OP_SUM);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // reported to the coordinator
    CHECK_OK(ringfold_cancel(h));
    const int rc = ringfold_wait(h, 10.0);
    const std::string why = err();
    if (rc != RINGFOLD_IN_PROGRESS) ringfold_release(h);
    CHECK(rc == RINGFOLD_ABORTED && why == "cancelled", std::to_string(rc) + " " + why);
  }
  int64_t b = -1;
  CHECK_OK(ringfold_barrier_async(0, &b));  // the others submit "lonely.c" only after the cancel
  CHECK_OK(finish(b));
  int64_t h = allreduce(one, out, RINGFOLD_FLOAT32, {4}, "lonely.c", RINGFOLD_OP_SUM);
  std::string why;
  CHECK_OK(finish(h, &why));
  CHECK(out[0] == 3.0f && out[3] == 3.0f, std::to_string(out[0]));
  h = allreduce(one, out, RINGFOLD_FLOAT32, {4}, "ran.c", RINGFOLD_OP_SUM);
  CHECK_EQ(ringfold_wait(h, kWait), RINGFOLD_OK);
  CHECK_OK(ringfold_cancel(h));  // too late: it ran, and stays as it ran
  CHECK_EQ(ringfold_wait(h, kWait), RINGFOLD_OK);
  CHECK_OK(ringfold_release(h));
  horovod_shutdown();
}

// Rank r runs r + 1 allreduces, then joins; the joined ranks contribute zeros; rank 2 joins last.
void join() {
  if (!init()) return;
  const int r = gRank;
  const float expected[3] = {6.0f, 5.0f, 3.0f};
  for (int i = 0; i <= r; ++i) {
    float v = static_cast<float>(r + 1);
    const std::string name = "join.ar." + std::to_string(i);
    CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, name.c_str(), RINGFOLD_OP_SUM)));
    CHECK(v == expected[i], name + " = " + std::to_string(v));
  }
  int64_t h;
  CHECK_OK(ringfold_join_async(0, &h));
  CHECK_OK(ringfold_wait(h, kWait));
  int last = -1;
  CHECK_OK(ringfold_join_last_rank(h, &last));
  CHECK_EQ(last, 2);
  CHECK_OK(ringfold_release(h));
  // Everyone is back: a normal allreduce.
  float v = 1.0f;
  CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "after.join", RINGFOLD_OP_SUM)));
  CHECK(v == 3.0f, std::to_string(v));
  horovod_shutdown();
}

// Shutdown on one rank stops every rank: pending handles fail with PRECONDITION_ERROR.
void shutdownOne() {
  if (!init()) return;
  const int r = gRank;
  float v = 1.0f;
  CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "warmup", RINGFOLD_OP_SUM)));
  if (r == 1) {
    horovod_shutdown();
    CHECK_EQ(horovod_is_initialized(), 0);
  } else {
    // Rank 1's shutdown reaches this engine at its next cycle, which may come before this
    // enqueue (refused at once) or after it (the handle completes with the error): the C ABI
    // allows both, with the same code and message.
    int64_t h = -1;
    int rc = ringfold_allreduce_async(&v, &v, RINGFOLD_FLOAT32, nullptr, 0, "never", RINGFOLD_OP_SUM, 1, 1, 0,
                                      RINGFOLD_CPU_DEVICE, &h);
    std::string why = err();
    if (rc == RINGFOLD_OK) rc = finish(h, &why);
    CHECK_EQ(rc, RINGFOLD_PRECONDITION_ERROR);
    CHECK(contains(why, "shut down"), why);
    int64_t h2;
    const int64_t s1[1] = {1};
    CHECK_EQ(ringfold_allreduce_async(&v, &v, RINGFOLD_FLOAT32, s1, 1, "after", 1, 1, 1, 0, -1, &h2),
             RINGFOLD_PRECONDITION_ERROR);
    horovod_shutdown();
  }
}

// init, work, shutdown, init again (elastic Horovod does this), work, shutdown.
void reinit() {
  for (int round = 0; round < 2; ++round) {
    if (!init()) return;
    float v = static_cast<float>(gRank + round);
    CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "reinit", RINGFOLD_OP_SUM)));
    CHECK(v == 3.0f + 3 * round, std::to_string(v));
    horovod_shutdown();
  }
}

// Rank 1 dies (_exit(1), or SIGSTOP: silent) after one allreduce; the others' next operation
// must fail with ABORTED within a bounded time. Survivors ignore ringfoldrun's SIGTERM so they
// can report; they record "<status> <seconds> <message>" in <dir>/result.<rank>.
// Rank 2 never submits "lonely" in time: ranks 0 and 1 get the stall failure (after a warning);
// rank 2, submitting it late, gets the same message. Rank 0 writes a timeline meanwhile.
void stall() {
  if (!init()) return;
  const int r = gRank;
  float v = 1.0f;
  CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "warmup", RINGFOLD_OP_SUM)));
  if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  std::string why;
  const int rc = finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "lonely", RINGFOLD_OP_SUM), &why);
  CHECK_EQ(rc, RINGFOLD_PRECONDITION_ERROR);
  message("stall", why);
  // Ranks 0 and 1 learn of the failure about 1.3 s before rank 2 wakes: wait for it, or "after"
  // would stall past the shutdown time too.
  if (r != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1800));
  float w = 2.0f;
  CHECK_OK(finish(allreduce(&w, &w, RINGFOLD_FLOAT32, {}, "after", RINGFOLD_OP_SUM)));
  CHECK(w == 6.0f, std::to_string(w));
  horovod_shutdown();
}

// Elastic-style re-init with a different layout: 3 ranks, then rank 2 leaves and ranks 0 and 1
// start again as a job of 2 (their RINGFOLD_/HOROVOD_ size variables changed in-process).
void relayout(const std::string& dir) {
  if (!init()) return;
  const int r = gRank;
  float v = 1.0f;
  CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "three", RINGFOLD_OP_SUM)));
  CHECK(v == 3.0f, std::to_string(v));
  horovod_shutdown();
  if (r == 2) {  // stays alive (idle) until the others are done, as a drained worker would
    for (int i = 0; i < 300 && !std::ifstream(dir + "/relayout.done"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return;
  }
  for (const char* prefix : {"RINGFOLD_", "HOROVOD_"}) {
    for (const char* what : {"SIZE", "LOCAL_SIZE"}) setenv((std::string(prefix) + what).c_str(), "2", 1);
  }
  if (!init()) return;
  CHECK_EQ(horovod_size(), 2);
  float u = static_cast<float>(r + 1);
  CHECK_OK(finish(allreduce(&u, &u, RINGFOLD_FLOAT32, {}, "two", RINGFOLD_OP_SUM)));
  CHECK(u == 3.0f, std::to_string(u));
  horovod_shutdown();
  if (r == 0) std::ofstream(dir + "/relayout.done") << "done";
}

void peerFailure(bool silent, const std::string& dir) {
  signal(SIGTERM, SIG_IGN);
  if (!init()) return;
  const int r = gRank;
  {
    std::ofstream(dir + "/pid." + std::to_string(r)) << getpid();
  }
  float v = 1.0f;
  CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, "before.failure", RINGFOLD_OP_SUM)));
  if (r == 1) {
    if (silent) raise(SIGSTOP);  // stays stopped until rank 0 kills it
    _exit(1);
  }
  const auto start = std::chrono::steady_clock::now();
  // The engine may already have seen rank 1 go (its next negotiation cycle fails): then the
  // enqueue itself returns the failure; otherwise the wait does.
  int64_t h = -1;
  std::string why;
  int rc = ringfold_allreduce_async(&v, &v, RINGFOLD_FLOAT32, nullptr, 0, "after.failure", RINGFOLD_OP_SUM, 1.0, 1.0,
                                    0, RINGFOLD_CPU_DEVICE, &h);
  if (rc == RINGFOLD_OK) {
    rc = finish(h, &why);
  } else {
    why = err();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    std::ofstream(dir + "/result." + std::to_string(r)) << rc << " " << seconds << " " << why;
  }
  CHECK_EQ(rc, RINGFOLD_ABORTED);
  message("failure", why);
  // Afterwards every enqueue fails at once, and shutdown returns.
  int64_t h2;
  const int64_t s1[1] = {1};
  CHECK_EQ(ringfold_allreduce_async(&v, &v, RINGFOLD_FLOAT32, s1, 1, "later", 1, 1, 1, 0, -1, &h2),
           RINGFOLD_ABORTED);
  if (silent && r == 0) {
    // Every other survivor first writes its outcome: a rank still timing out on rank 1 must find
    // it stopped, not killed (the message it writes looks the process up).
    for (int other = 2; other < horovod_size(); ++other) {
      for (int i = 0; i < 300 && !std::ifstream(dir + "/result." + std::to_string(other)); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    std::ifstream in(dir + "/pid.1");
    pid_t pid = 0;
    in >> pid;
    if (pid > 0) kill(pid, SIGKILL);
  }
  horovod_shutdown();
}

// Alltoall splits that the caller's own arguments make wrong fail at once, on the rank that
// made them, naming the argument; nothing is enqueued, so no rank waits for the others.
void badCounts() {
  if (!init()) return;
  int8_t x[4] = {1, 2, 3, 4};
  const int64_t s4[1] = {4};
  int64_t h = -1;
  auto alltoall = [&](const std::vector<int64_t>& splits, const int64_t* shape) {
    const int rc = ringfold_alltoall_async(x, RINGFOLD_INT8, shape, 1, splits.data(), static_cast<int>(splits.size()),
                                           "bad.splits", 0, RINGFOLD_CPU_DEVICE, &h);
    return std::to_string(rc) + " " + err();
  };
  const std::string invalid = std::to_string(RINGFOLD_INVALID_ARGUMENT) + " ";
  // Horovod's example: the sum overflowed ("splits add up to -9223372036854775807").
  std::string got = alltoall({INT64_MAX, 2, 0}, s4);
  CHECK(got.rfind(invalid, 0) == 0 &&
            contains(got, "splits add up to more than the first dimension 4: splits[0] alone is 9223372036854775807"),
        got);
  got = alltoall({3, 3, 0}, s4);
  CHECK(got.rfind(invalid, 0) == 0 && contains(got, "splits add up to 6, more than the first dimension 4"), got);
  // Each split fits the (huge, never read) first dimension, but their sum does not fit in 64 bits.
  const int64_t big[1] = {int64_t{1} << 62};
  got = alltoall({int64_t{1} << 62, int64_t{1} << 62, int64_t{1} << 62}, big);
  CHECK(got.rfind(invalid, 0) == 0 && contains(got, "splits add up to more than the first dimension 4611686018427387904"),
        got);
  CHECK(!contains(got, "-"), got);
  message("splits", got);
  horovod_shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  return rftest::runScenario(argc, argv, false, {
      {"collectives", [](const std::string&) { collectives(); }},
      {"static_sets", [](const std::string&) { staticSets(); }},
      {"dynamic_sets", [](const std::string&) { dynamicSets(); }},
      {"join", [](const std::string&) { join(); }},
      {"cancel", [](const std::string&) { cancel(); }},
      {"shutdown_one", [](const std::string&) { shutdownOne(); }},
      {"reinit", [](const std::string&) { reinit(); }},
      {"stall", [](const std::string&) { stall(); }},
      {"relayout", [](const std::string& dir) { relayout(dir); }},
      {"killed", [](const std::string& dir) { peerFailure(false, dir); }},
      {"stopped", [](const std::string& dir) { peerFailure(true, dir); }},
      {"bad_counts", [](const std::string&) { badCounts(); }},
  });
}
