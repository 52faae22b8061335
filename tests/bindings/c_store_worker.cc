// A rank of c_store_test.cc's multi-process tests (under ringfoldrun -np 3): the job's store
// through ringfold_store_* before init, between shutdown and init, and from a rank that re-lays
// itself out as a job of one; and RINGFOLD_INCARNATION naming the store keys of an init.
// Prints worker.h's FAIL / MSG / DONE lines.
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/bindings/worker.h"

namespace rftest {
namespace {

// The launcher's layout variables, RINGFOLD_ and HOROVOD_ names alike (they must agree).
void setLayout(int rank, int size, int localRank, int localSize, int crossRank, int crossSize) {
  const std::pair<const char*, int> vars[] = {{"RANK", rank},           {"SIZE", size},
                                              {"LOCAL_RANK", localRank}, {"LOCAL_SIZE", localSize},
                                              {"CROSS_RANK", crossRank}, {"CROSS_SIZE", crossSize}};
  for (const auto& [suffix, value] : vars) {
    for (const char* prefix : {"RINGFOLD_", "HOROVOD_"}) {
      setenv((std::string(prefix) + suffix).c_str(), std::to_string(value).c_str(), 1);
    }
  }
}

#define CHECK_STR(a, b)                                                                  \
  do {                                                                                   \
    const std::string a_ = (a), b_ = (b);                                                \
    if (a_ != b_) rftest::fail(__LINE__, std::string(#a) + " is '" + a_ + "', not '" + b_ + "'"); \
  } while (0)

int envInt(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

void set(const std::string& key, const std::string& value) {
  CHECK_OK(ringfold_store_set(key.c_str(), value.data(), value.size()));
}

// The value of `key` (waiting up to kWait), or "<rc: message>" when the call failed.
std::string get(const std::string& key, double timeout = kWait) {
  std::vector<char> buf(64);
  size_t len = 0;
  int rc = ringfold_store_get(key.c_str(), timeout, buf.data(), buf.size(), &len);
  if (rc == RINGFOLD_INVALID_ARGUMENT && len > buf.size()) {
    buf.resize(len);
    rc = ringfold_store_get(key.c_str(), timeout, buf.data(), buf.size(), &len);
  }
  if (rc != RINGFOLD_OK) return "<" + std::to_string(rc) + ": " + err() + ">";
  return std::string(buf.data(), len);
}

float sumOfOnes(const char* name) {
  float v = 1.0f;
  CHECK_OK(finish(allreduce(&v, &v, RINGFOLD_FLOAT32, {}, name, RINGFOLD_OP_SUM)));
  return v;
}

// Every rank writes a key before init and reads the others'; a value longer than the first
// buffer; a missing key times out with IN_PROGRESS; and the store is still there between
// shutdown and the next init.
void store() {
  const int r = envInt("RINGFOLD_RANK");
  gRank = r;
  const std::string prefix = "store_test/";
  const std::string longValue(1000, static_cast<char>('a' + r));
  set(prefix + "r" + std::to_string(r), "hello from " + std::to_string(r));
  set(prefix + "long" + std::to_string(r), longValue);
  for (int other = 0; other < envInt("RINGFOLD_SIZE"); ++other) {
    CHECK_STR(get(prefix + "r" + std::to_string(other)), "hello from " + std::to_string(other));
    const std::string got = get(prefix + "long" + std::to_string(other));
    CHECK(got == std::string(1000, static_cast<char>('a' + other)), got.substr(0, 80));
  }
  CHECK_EQ(ringfold_store_check((prefix + "r" + std::to_string(r)).c_str()), 1);
  CHECK_EQ(ringfold_store_check((prefix + "missing").c_str()), 0);
  size_t len = 0;
  char small[4];
  CHECK_EQ(ringfold_store_get((prefix + "missing").c_str(), 0.2, small, sizeof small, &len), RINGFOLD_IN_PROGRESS);
  CHECK(contains(err(), "missing"), err());

  CHECK(horovod_init(nullptr, 0, nullptr, nullptr, 0), err());
  CHECK(sumOfOnes("first") == 3.0f, "allreduce");
  horovod_shutdown();
  // Between shutdown and init: rank 0 publishes, the others wait for it.
  if (r == 0) set(prefix + "between", "down");
  CHECK_STR(get(prefix + "between"), "down");
  CHECK(horovod_init(nullptr, 0, nullptr, nullptr, 0), err());
  CHECK(sumOfOnes("second") == 3.0f, "allreduce");
  horovod_shutdown();
}

// Rank 0 first runs an init of its own as a job of one (its count of inits is then ahead of the
// others'); then every rank inits with RINGFOLD_INCARNATION=4 and they meet. With
// `withIncarnation` false (the control) they do not: rank 0's second init uses the keys of its
// init number 1, the others' first the keys of number 0, and every init times out.
void incarnation(bool withIncarnation) {
  const int r = envInt("RINGFOLD_RANK");
  gRank = r;
  const int size = envInt("RINGFOLD_SIZE");
  const int lr = envInt("RINGFOLD_LOCAL_RANK"), ls = envInt("RINGFOLD_LOCAL_SIZE");
  const int cr = envInt("RINGFOLD_CROSS_RANK"), cs = envInt("RINGFOLD_CROSS_SIZE");
  if (r == 0) {
    setLayout(0, 1, 0, 1, 0, 1);
    CHECK(horovod_init(nullptr, 0, nullptr, nullptr, 0), err());
    CHECK_EQ(horovod_size(), 1);
    horovod_shutdown();
    setLayout(r, size, lr, ls, cr, cs);
  }
  if (withIncarnation) setenv("RINGFOLD_INCARNATION", "4", 1);
  const bool ok = horovod_init(nullptr, 0, nullptr, nullptr, 0);
  message("init", ok ? "ok" : "failed");
  if (ok) {
    CHECK(sumOfOnes("met") == 3.0f, "allreduce");
    horovod_shutdown();
  }
}

// Rank 2 re-lays itself out as a job of one: its store calls still reach the launcher's store
// (RINGFOLD_STORE_ADDR/PORT/SECRET), not one in its own memory.
void single() {
  const int r = envInt("RINGFOLD_RANK");
  gRank = r;
  if (r == 2) {
    setLayout(0, 1, 0, 1, 0, 1);
    set("single_test/from2", "alone");
    CHECK(horovod_init(nullptr, 0, nullptr, nullptr, 0), err());
    CHECK_EQ(horovod_size(), 1);
    horovod_shutdown();
    CHECK_STR(get("single_test/ack"), "seen");
  } else {
    CHECK_STR(get("single_test/from2"), "alone");
    if (r == 0) set("single_test/ack", "seen");
  }
}

}  // namespace
}  // namespace rftest

int main(int argc, char** argv) {
  return rftest::runScenario(argc, argv, false, {
      {"store", [](const std::string&) { rftest::store(); }},
      {"incarnation", [](const std::string&) { rftest::incarnation(true); }},
      {"no_incarnation", [](const std::string&) { rftest::incarnation(false); }},
      {"single", [](const std::string&) { rftest::single(); }},
  });
}
