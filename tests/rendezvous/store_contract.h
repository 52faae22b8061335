// The Store contract (store.h), as one parameterized suite run against every backend.
// A backend hands out clients of one shared key space; for TcpStore each client is its own
// connection, so "another client sets the key" really crosses the network.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "rendezvous/store.h"

namespace ringfold::rendezvous::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::shared_ptr<Store> client() = 0;
};

struct BackendFactory {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
};

inline std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class StoreContract : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override {
    backend_ = GetParam().make();
    store_ = backend_->client();
  }
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreContract, SetGetReplace) {
  store_->set("k", bytes("one"));
  EXPECT_EQ(store_->getString("k", 1s), "one");
  store_->set("k", bytes("two!"));
  EXPECT_EQ(store_->getString("k", 1s), "two!");
  std::vector<uint8_t> binary = {0, 1, 2, 255, 0, 10};
  store_->set("bin", binary);
  EXPECT_EQ(store_->get("bin", 1s), binary);
  store_->set("empty", {});
  EXPECT_TRUE(store_->get("empty", 1s).empty());
  EXPECT_TRUE(store_->check({"empty"}));
}

TEST_P(StoreContract, OddAndLongKeys) {
  const std::string odd = std::string("a/b c%.\x01..") + '\0' + "z";
  const std::string longKey(1000, 'x');
  store_->setString(odd, "odd");
  store_->setString(longKey, "long");
  store_->setString("..", "dots");
  EXPECT_EQ(store_->getString(odd, 1s), "odd");
  EXPECT_EQ(store_->getString(longKey, 1s), "long");
  EXPECT_EQ(store_->getString("..", 1s), "dots");
  EXPECT_FALSE(store_->check({std::string(999, 'x')}));
}

TEST_P(StoreContract, GetWaitsForAnotherClientsSet) {
  auto other = backend_->client();
  auto start = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    other->setString("late", "here");
  });
  EXPECT_EQ(store_->getString("late", 5s), "here");
  setter.join();
  EXPECT_GE(Clock::now() - start, 90ms);
}

TEST_P(StoreContract, GetTimesOutNamingTheKey) {
  auto start = Clock::now();
  try {
    store_->get("never-set-key", 200ms);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "never-set-key")) << e.what();
  }
  auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 190ms);
  EXPECT_LT(elapsed, 3s);
  // The store stays usable after a timed-out get.
  store_->setString("after", "ok");
  EXPECT_EQ(store_->getString("after", 1s), "ok");
}

TEST_P(StoreContract, ExtremeTimeouts) {
  store_->setString("there", "1");
  EXPECT_EQ(store_->getString("there", std::chrono::milliseconds::max()), "1");
  EXPECT_EQ(store_->getString("there", 0ms), "1");
  EXPECT_THROW(store_->get("absent", -5ms), TimeoutError);
  EXPECT_THROW(store_->wait({"absent"}, 0ms), TimeoutError);
}

TEST_P(StoreContract, AddIsACounterReadableAsText) {
  EXPECT_EQ(store_->add("c", 5), 5);
  EXPECT_EQ(store_->add("c", -7), -2);
  EXPECT_EQ(store_->add("c", 0), -2);
  EXPECT_EQ(store_->getString("c", 1s), "-2");
  store_->setString("c2", "40");
  EXPECT_EQ(store_->add("c2", 2), 42);
  store_->setString("text", "not a number");
  EXPECT_THROW(store_->add("text", 1), InvalidArgument);
  EXPECT_EQ(store_->getString("text", 1s), "not a number");
  EXPECT_EQ(store_->add("c", 1), -1);  // still usable after the error
}

TEST_P(StoreContract, AddWakesAWaitingGet) {
  auto other = backend_->client();
  std::thread adder([&] {
    std::this_thread::sleep_for(50ms);
    other->add("counter", 3);
  });
  EXPECT_EQ(store_->getString("counter", 5s), "3");
  adder.join();
}

TEST_P(StoreContract, CheckAndWait) {
  EXPECT_TRUE(store_->check({}));
  EXPECT_FALSE(store_->check({"a"}));
  store_->setString("a", "1");
  EXPECT_TRUE(store_->check({"a"}));
  EXPECT_FALSE(store_->check({"a", "b"}));
  try {
    store_->wait({"a", "b"}, 150ms);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "'b'")) << e.what();
    EXPECT_FALSE(contains(e.what(), "'a'")) << e.what();
  }
  store_->setString("b", "2");
  store_->wait({"a", "b"}, 1s);
}

TEST_P(StoreContract, ConcurrentAddsLoseNothing) {
  constexpr int kThreads = 8, kAdds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto s = t % 2 == 0 ? store_ : backend_->client();  // shared and separate clients
      for (int i = 0; i < kAdds; ++i) s->add("sum", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->getString("sum", 1s), std::to_string(kThreads * kAdds));
}

TEST_P(StoreContract, DeletePrefixRemovesExactlyTheKeysUnderIt) {
  const std::string longKey = "ps1/" + std::string(1000, 'y');  // FileStore: a hashed name
  const std::string oddKey = std::string("ps1/o d%\x01") + '\0';
  store_->setString("ps1/a", "1");
  store_->setString("ps1/b/c", "2");
  store_->setString(longKey, "3");
  store_->setString(oddKey, "4");
  store_->add("ps1/counter", 5);
  store_->setString("ps10/a", "kept: a sibling whose name only begins the same");
  store_->setString("ps1", "kept: the prefix without its slash");
  store_->setString("other", "kept");
  store_->setString(std::string(999, 'x'), "kept: long, not under it");
  EXPECT_EQ(store_->deletePrefix("ps1/"), 5);
  EXPECT_FALSE(store_->check({"ps1/a"}));
  EXPECT_FALSE(store_->check({"ps1/b/c"}));
  EXPECT_FALSE(store_->check({longKey}));
  EXPECT_FALSE(store_->check({oddKey}));
  EXPECT_FALSE(store_->check({"ps1/counter"}));
  EXPECT_TRUE(store_->check({"ps10/a", "ps1", "other", std::string(999, 'x')}));
  EXPECT_THROW(store_->get("ps1/a", 0ms), TimeoutError);
  EXPECT_EQ(store_->deletePrefix("ps1/"), 0);  // nothing left there
  // The prefix can be used again, and a deleted counter starts from 0.
  EXPECT_EQ(store_->add("ps1/counter", 1), 1);
  store_->setString(longKey, "again");
  EXPECT_EQ(store_->getString(longKey, 1s), "again");
  // Another client sees the deletion too.
  auto other = backend_->client();
  // Without the slash the prefix takes "ps1" itself and its sibling "ps10/a" too.
  EXPECT_EQ(other->deletePrefix("ps1"), 4);
  EXPECT_FALSE(store_->check({"ps1"}));
  EXPECT_FALSE(store_->check({"ps10/a"}));
  EXPECT_TRUE(store_->check({"other"}));
  EXPECT_EQ(store_->deletePrefix(""), 2);  // every key left
  EXPECT_FALSE(store_->check({"other"}));
}

TEST_P(StoreContract, AWaiterOnADeletedKeyKeepsWaiting) {
  auto other = backend_->client();
  // A key deleted before the get: the get waits (and times out) instead of finding it.
  store_->setString("w/gone", "old");
  EXPECT_EQ(other->deletePrefix("w/"), 1);
  EXPECT_THROW(store_->get("w/gone", 150ms), TimeoutError);
  // A get blocked while its key (and others under the prefix) is deleted is not woken by the
  // delete: it returns the value of the next set.
  store_->setString("w/sibling", "x");
  std::atomic<bool> returned{false};
  std::string got;
  std::thread waiter([&] {
    try {
      got = store_->getString("w/late", 10s);
    } catch (const std::exception& e) {
      got = std::string("error: ") + e.what();
    }
    returned = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(other->deletePrefix("w/"), 1);
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(returned.load()) << got;
  other->setString("w/late", "new");
  waiter.join();
  EXPECT_EQ(got, "new");
}

}  // namespace ringfold::rendezvous::testing
