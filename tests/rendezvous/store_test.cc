// HashStore, FileStore and PrefixStore: the Store contract plus each backend's own promises.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "child_process.h"
#include "rendezvous/file_store.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/prefix_store.h"
#include "store_contract.h"

namespace ringfold::rendezvous::testing {
namespace {

namespace fs = std::filesystem;

std::string makeTempDir() {
  std::string tmpl = (fs::temp_directory_path() / "ringfold-store-XXXXXX").string();
  char* dir = ::mkdtemp(tmpl.data());
  if (dir == nullptr) throw std::runtime_error("mkdtemp failed");
  return dir;
}

class TempDir {
 public:
  TempDir() : path_(makeTempDir()) {}
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

template <typename T>
std::shared_ptr<Store> borrowed(T& store) {
  return std::shared_ptr<Store>(&store, [](Store*) {});
}

class HashBackend : public Backend {
 public:
  std::shared_ptr<Store> client() override { return borrowed(store_); }
 private:
  HashStore store_;
};

class FileBackend : public Backend {
 public:
  std::shared_ptr<Store> client() override { return std::make_shared<FileStore>(dir_.path() + "/sub/dir"); }
 private:
  TempDir dir_;
};

class PrefixBackend : public Backend {
 public:
  explicit PrefixBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)), base_(inner_->client()) {}
  std::shared_ptr<Store> client() override { return std::make_shared<PrefixStore>(*base_, "job/7"); }
 private:
  std::unique_ptr<Backend> inner_;
  std::shared_ptr<Store> base_;
};

INSTANTIATE_TEST_SUITE_P(
    Backends, StoreContract,
    ::testing::Values(
        BackendFactory{"Hash", [] { return std::make_unique<HashBackend>(); }},
        BackendFactory{"File", [] { return std::make_unique<FileBackend>(); }},
        BackendFactory{"PrefixOverHash",
                       [] { return std::make_unique<PrefixBackend>(std::make_unique<HashBackend>()); }},
        BackendFactory{"PrefixOverFile",
                       [] { return std::make_unique<PrefixBackend>(std::make_unique<FileBackend>()); }}),
    [](const auto& info) { return info.param.name; });

TEST(PrefixStore, NamespacesKeys) {
  HashStore base;
  PrefixStore a(base, "a"), b(base, "b");
  a.setString("k", "in a");
  EXPECT_TRUE(base.check({"a/k"}));
  EXPECT_FALSE(b.check({"k"}));
  EXPECT_THROW(b.get("k", std::chrono::milliseconds(20)), TimeoutError);
  b.setString("k", "in b");
  EXPECT_EQ(a.getString("k", 1s), "in a");
  EXPECT_EQ(base.getString("b/k", 1s), "in b");
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(base.getString("a/n", 1s), "2");
  EXPECT_THROW((PrefixStore{base, ""}), Error);
}

TEST(HashStore, ZeroTimeoutReturnsExistingKeyAndTimesOutOnMissing) {
  HashStore s;
  s.setString("x", "1");
  EXPECT_EQ(s.getString("x", 0ms), "1");
  EXPECT_THROW(s.get("y", 0ms), TimeoutError);
}

TEST(FileStore, LeavesNoTemporaryFiles) {
  TempDir dir;
  FileStore s(dir.path());
  for (int i = 0; i < 20; ++i) {
    s.setString("k" + std::to_string(i % 3), std::string(1000, 'a' + i % 26));
    s.add("c", 1);
  }
  for (const auto& e : fs::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.rfind("k_", 0) == 0 || name == ".lock") << name;
  }
}

TEST(FileStore, RejectsAFileAsDirectory) {
  TempDir dir;
  std::string file = dir.path() + "/plain";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_THROW(FileStore{file}, Error);
}

// add() must be atomic across processes, not only threads.
TEST(FileStore, ConcurrentAddAcrossProcesses) {
  TempDir dir;
  constexpr int kProcs = 4, kAdds = 100;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pids.push_back(forkChild([&] {
      FileStore s(dir.path());
      for (int i = 0; i < kAdds; ++i) s.add("sum", 1);
      s.setString("done/" + std::to_string(p), "1");
      return 0;
    }));
  }
  FileStore s(dir.path());
  std::vector<std::string> done;
  for (int p = 0; p < kProcs; ++p) done.push_back("done/" + std::to_string(p));
  s.wait(done, 20s);
  for (pid_t pid : pids) EXPECT_EQ(waitChild(pid, 20s), 0);
  EXPECT_EQ(s.getString("sum", 1s), std::to_string(kProcs * kAdds));
}

// A reader in another process sees each value whole: old or new, never torn.
TEST(FileStore, ReadersNeverSeeTornWrites) {
  TempDir dir;
  const std::string a(200000, 'a'), b(200000, 'b');
  FileStore s(dir.path());
  s.setString("v", a);
  pid_t writer = forkChild([&] {
    FileStore w(dir.path());
    for (int i = 0; i < 50; ++i) w.setString("v", i % 2 ? a : b);
    return 0;
  });
  int torn = 0;
  for (int i = 0; i < 200; ++i) {
    std::string v = s.getString("v", 1s);
    if (v != a && v != b) ++torn;
  }
  EXPECT_EQ(waitChild(writer, 20s), 0);
  EXPECT_EQ(torn, 0);
}

}  // namespace
}  // namespace ringfold::rendezvous::testing
