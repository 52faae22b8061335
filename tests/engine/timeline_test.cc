// Timeline: the file is a valid Chrome-trace JSON array after every flush and after stop, B/E
// pairs balance per tensor row, names are escaped, inactive calls write nothing, and start/stop
// may race with events from other threads. The file is parsed by a small strict JSON parser
// below (and, where python3 is installed, cross-checked with Python's json module).
#include "engine/timeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"

namespace {

using ringfold::InvalidArgument;
using ringfold::engine::Timeline;
using namespace std::chrono_literals;

// ---- A strict JSON parser (RFC 8259): no trailing commas, no trailing garbage. ----------------

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  double number = 0;
  std::string str;
  std::vector<Json> items;                             // array
  // An object's members, in file order. Member, not std::pair<std::string, Json>: clang 14 (the
  // sanitizer builds) instantiates that pair while Json is still incomplete and fails.
  struct Member;
  std::vector<Member> members;

  const Json* get(const std::string& key) const;
  std::string getString(const std::string& key) const {
    const Json* v = get(key);
    return v != nullptr && v->kind == kString ? v->str : std::string();
  }
  double getNumber(const std::string& key) const {
    const Json* v = get(key);
    return v != nullptr && v->kind == kNumber ? v->number : -1;
  }
};

struct Json::Member {
  std::string key;
  Json value;
};

const Json* Json::get(const std::string& key) const {
  for (const auto& [k, v] : members) {
    if (k == key) return &v;
  }
  return nullptr;
}

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}

  // The parsed document, or nullopt with error() saying where it went wrong.
  std::optional<Json> parse() {
    Json v;
    skipSpace();
    if (!value(v)) return std::nullopt;
    skipSpace();
    if (pos_ != s_.size()) return fail("trailing characters");
    return v;
  }
  const std::string& error() const { return error_; }

 private:
  std::nullopt_t fail(const std::string& what) {
    if (error_.empty()) error_ = what + " at offset " + std::to_string(pos_);
    return std::nullopt;
  }
  void skipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }
  bool value(Json& v) {
    if (pos_ >= s_.size()) return (fail("unexpected end"), false);
    char c = s_[pos_];
    if (c == '{') return object(v);
    if (c == '[') return array(v);
    if (c == '"') return (v.kind = Json::kString, string(v.str));
    if (literal("true")) return (v.kind = Json::kBool, v.boolean = true, true);
    if (literal("false")) return (v.kind = Json::kBool, true);
    if (literal("null")) return true;
    return number(v);
  }
  bool number(Json& v) {
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (!digits()) {
      return (fail("bad value"), false);
    }
    if (pos_ < s_.size() && s_[pos_] == '.' && (++pos_, !digits())) return (fail("bad fraction"), false);
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return (fail("bad exponent"), false);
    }
    v.kind = Json::kNumber;
    v.number = std::stod(s_.substr(start, pos_ - start));
    return true;
  }
  static void appendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool string(std::string& out) {
    ++pos_;  // opening quote
    while (pos_ < s_.size()) {
      auto c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return true;
      if (c < 0x20) return (fail("raw control character in string"), false);
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return (fail("short \\u escape"), false);
          uint32_t cp = static_cast<uint32_t>(std::stoul(s_.substr(pos_, 4), nullptr, 16));
          pos_ += 4;
          appendUtf8(out, cp);  // the timeline never writes surrogate pairs
          break;
        }
        default: return (fail("bad escape"), false);
      }
    }
    return (fail("unterminated string"), false);
  }
  template <typename Element>
  bool sequence(char close, Element element) {
    ++pos_;
    skipSpace();
    if (pos_ < s_.size() && s_[pos_] == close) return (++pos_, true);
    while (true) {
      skipSpace();
      if (!element()) return false;
      skipSpace();
      if (pos_ >= s_.size()) return (fail("unexpected end"), false);
      if (s_[pos_] == close) return (++pos_, true);
      if (s_[pos_] != ',') return (fail("expected ','"), false);
      ++pos_;
    }
  }
  bool array(Json& v) {
    v.kind = Json::kArray;
    return sequence(']', [&] { return value(v.items.emplace_back()); });
  }
  bool object(Json& v) {
    v.kind = Json::kObject;
    return sequence('}', [&] {
      if (pos_ >= s_.size() || s_[pos_] != '"') return (fail("expected key"), false);
      auto& member = v.members.emplace_back();
      if (!string(member.key)) return false;
      skipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return (fail("expected ':'"), false);
      ++pos_;
      skipSpace();
      return value(member.value);
    });
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool havePython() {
  static const bool have = std::system("python3 -c '' >/dev/null 2>&1") == 0;
  return have;
}

// ---- Fixture -----------------------------------------------------------------------------------

class TimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("rf_timeline_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name = "timeline.json") const { return (dir_ / name).string(); }

  // The file's events; fails the test if it is not a valid JSON array of objects.
  static std::vector<Json> events(const std::string& file) {
    std::string text = readFile(file);
    JsonParser parser(text);
    std::optional<Json> doc = parser.parse();
    EXPECT_TRUE(doc.has_value()) << file << ": " << parser.error() << "\n" << text.substr(0, 2000);
    if (!doc) return {};
    EXPECT_EQ(doc->kind, Json::kArray);
    for (const Json& e : doc->items) EXPECT_EQ(e.kind, Json::kObject);
    return doc->items;
  }

  static void expectPythonAccepts(const std::string& file) {
    if (!havePython()) return;
    std::string cmd = "python3 -c 'import json,sys; json.load(open(sys.argv[1], encoding=\"utf-8\"))' '" + file + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "python3's json module rejects " << file;
  }

  // Events with the given "ph" (and pid, if >= 0).
  static std::vector<Json> withPhase(const std::vector<Json>& all, const std::string& ph, int pid = -1) {
    std::vector<Json> out;
    for (const Json& e : all) {
      if (e.getString("ph") == ph && (pid < 0 || e.getNumber("pid") == pid)) out.push_back(e);
    }
    return out;
  }

  // The pid whose process_name metadata names `tensor`, or -1.
  static int pidOf(const std::vector<Json>& all, const std::string& tensor) {
    for (const Json& e : withPhase(all, "M")) {
      const Json* args = e.get("args");
      if (e.getString("name") == "process_name" && args != nullptr && args->getString("name") == tensor) {
        return static_cast<int>(e.getNumber("pid"));
      }
    }
    return -1;
  }

  // Checks that every pid's B/E events nest properly and close, and that ts never goes back.
  static void expectBalanced(const std::vector<Json>& all) {
    std::map<int, std::vector<std::string>> open;
    std::map<int, double> lastTs;
    for (const Json& e : all) {
      std::string ph = e.getString("ph");
      if (ph == "M") continue;
      int pid = static_cast<int>(e.getNumber("pid"));
      EXPECT_GE(e.getNumber("ts"), lastTs[pid]) << "pid " << pid;
      lastTs[pid] = e.getNumber("ts");
      if (ph == "B") {
        open[pid].push_back(e.getString("name"));
      } else if (ph == "E") {
        ASSERT_FALSE(open[pid].empty()) << "E without B on pid " << pid;
        open[pid].pop_back();
      }
    }
    for (const auto& [pid, stack] : open) EXPECT_TRUE(stack.empty()) << "pid " << pid << " left " << stack.size() << " open";
  }

  std::filesystem::path dir_;
};

// One tensor's full life: negotiation with two ranks, an op with two nested activities.
void recordTensor(Timeline& t, const std::string& name) {
  t.negotiateStart(name, "ALLREDUCE");
  t.negotiateRankReady(name, 0);
  t.negotiateRankReady(name, 1);
  t.negotiateEnd(name);
  t.opStart(name, "ALLREDUCE");
  t.activityStart(name, "MEMCPY_IN_FUSION_BUFFER");
  t.activityEnd(name);
  t.activityStart(name, "TCP_RING_ALLREDUCE");
  t.activityStart(name, "REDUCE");
  t.activityEnd(name);
  t.activityEnd(name);
  t.opEnd(name, "float32", {2, 3});
}

TEST_F(TimelineTest, InactiveCallsWriteNothing) {
  Timeline never;
  EXPECT_FALSE(never.active());
  recordTensor(never, "t");
  never.cycleStart();
  never.flush();
  never.stop();

  Timeline t;
  t.start(path(), true);
  recordTensor(t, "a");
  t.stop();
  EXPECT_FALSE(t.active());
  std::string before = readFile(path());
  recordTensor(t, "b");
  t.cycleStart();
  t.flush();
  t.stop();
  EXPECT_EQ(readFile(path()), before);
}

TEST_F(TimelineTest, HeaderCarriesWallClockStart) {
  Timeline t;
  t.start(path(), false);
  EXPECT_TRUE(t.active());
  std::vector<Json> all = events(path());  // before any flush: just the header
  ASSERT_EQ(all.size(), 2u);
  const Json* args = all[0].get("args");
  ASSERT_NE(args, nullptr);
  double start = args->getNumber("start_time_since_epoch_in_micros");
  double now = std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_GT(start, now - 3600e6);
  EXPECT_LE(start, now);
  EXPECT_EQ(all[0].getString("ph"), "M");
  EXPECT_EQ(all[0].getNumber("pid"), 0);
}

TEST_F(TimelineTest, ValidAfterEachFlushWhileActive) {
  Timeline t;
  t.start(path(), false);
  size_t previous = events(path()).size();
  for (int round = 0; round < 5; ++round) {
    recordTensor(t, "tensor" + std::to_string(round % 2));
    t.flush();
    std::vector<Json> all = events(path());
    EXPECT_GT(all.size(), previous) << "round " << round;
    previous = all.size();
    expectBalanced(all);
    if (round == 0) expectPythonAccepts(path());
  }
  t.flush();  // nothing new: the file is unchanged and still valid
  EXPECT_EQ(events(path()).size(), previous);
  t.stop();
  expectPythonAccepts(path());
}

TEST_F(TimelineTest, WriterThreadFlushesOnItsOwn) {
  Timeline t;
  t.start(path(), false);
  t.opStart("w", "BROADCAST");
  auto deadline = std::chrono::steady_clock::now() + 10s;  // ~100 ms expected; generous for loaded hosts
  while (readFile(path()).find("BROADCAST") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  std::vector<Json> all = events(path());
  EXPECT_EQ(withPhase(all, "B").size(), 1u);
}

TEST_F(TimelineTest, NestedPairsBalancePerPid) {
  Timeline t;
  t.start(path(), false);
  // Two tensors interleaved, as the engine does when it fuses them.
  t.negotiateStart("x", "ALLREDUCE");
  t.negotiateStart("y", "ALLGATHER");
  t.negotiateRankReady("x", 1);
  t.negotiateRankReady("y", 0);
  t.negotiateEnd("x");
  t.negotiateEnd("y");
  t.opStart("x", "ALLREDUCE");
  t.opStart("y", "ALLGATHER");
  t.activityStart("x", "MEMCPY_IN_FUSION_BUFFER");
  t.activityStart("y", "MEMCPY_IN_FUSION_BUFFER");
  t.activityEnd("x");
  t.activityEnd("y");
  t.activityStart("x", "TCP_RING_ALLREDUCE");
  t.activityStart("x", "REDUCE");  // left open: opEnd closes it
  t.opEnd("x", "float32", {2, 3});
  t.opEnd("y", "int64", {});
  // Calls that do not fit the state are ignored rather than unbalancing the file.
  t.activityEnd("x");
  t.opEnd("x", "float32", {1});
  t.negotiateEnd("y");
  t.activityStart("never_started", "MEMCPY_IN_FUSION_BUFFER");
  t.opStart("z", "BROADCAST");
  t.opStart("z", "BROADCAST");
  t.opEnd("z", "uint8", {7});
  t.stop();

  std::vector<Json> all = events(path());
  expectBalanced(all);
  int x = pidOf(all, "x"), y = pidOf(all, "y"), z = pidOf(all, "z");
  EXPECT_EQ(pidOf(all, "never_started"), -1);

  std::vector<std::string> xNames;
  for (const Json& e : withPhase(all, "B", x)) xNames.push_back(e.getString("name"));
  EXPECT_EQ(xNames, (std::vector<std::string>{"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER",
                                              "TCP_RING_ALLREDUCE", "REDUCE"}));
  EXPECT_EQ(withPhase(all, "B", y).front().getString("name"), "NEGOTIATE_ALLGATHER");
  EXPECT_EQ(withPhase(all, "B", z).size(), 1u);

  // Rank-ready ticks are 1 us X events named by rank, inside the negotiation.
  std::vector<Json> ticks = withPhase(all, "X", x);
  ASSERT_EQ(ticks.size(), 1u);
  EXPECT_EQ(ticks[0].getString("name"), "1");
  EXPECT_EQ(ticks[0].getNumber("dur"), 1);
  EXPECT_GE(ticks[0].getNumber("ts"), withPhase(all, "B", x).front().getNumber("ts"));

  // The op's E (the last E on the row) carries dtype and shape.
  std::vector<Json> xEnds = withPhase(all, "E", x), yEnds = withPhase(all, "E", y);
  const Json* xArgs = xEnds.back().get("args");
  ASSERT_NE(xArgs, nullptr);
  EXPECT_EQ(xArgs->getString("dtype"), "float32");
  EXPECT_EQ(xArgs->getString("shape"), "[2, 3]");
  const Json* yArgs = yEnds.back().get("args");
  ASSERT_NE(yArgs, nullptr);
  EXPECT_EQ(yArgs->getString("shape"), "[]");
  expectPythonAccepts(path());
}

TEST_F(TimelineTest, NamesAreEscaped) {
  const std::vector<std::string> names = {"q\"uote", "back\\slash", "new\nline\ttab", std::string("ctl\x01\x1f", 5),
                                          "caf\xc3\xa9/\xe2\x82\xac", "slash/and spaces"};
  Timeline t;
  t.start(path(), false);
  for (const std::string& n : names) recordTensor(t, n);
  recordTensor(t, "bad\xff\xc3(");  // not UTF-8: replaced, the file stays valid
  t.opStart("op", "WEIRD\"OP");
  t.opEnd("op", "d\"type", {1});
  t.stop();

  std::vector<Json> all = events(path());
  for (const std::string& n : names) EXPECT_GT(pidOf(all, n), 0) << n;
  EXPECT_GT(pidOf(all, "bad\xef\xbf\xbd\xef\xbf\xbd("), 0);
  int op = pidOf(all, "op");
  EXPECT_EQ(withPhase(all, "B", op).front().getString("name"), "WEIRD\"OP");
  std::vector<Json> opEnds = withPhase(all, "E", op);
  const Json* opArgs = opEnds.back().get("args");
  ASSERT_NE(opArgs, nullptr);
  EXPECT_EQ(opArgs->getString("dtype"), "d\"type");
  expectBalanced(all);
  expectPythonAccepts(path());
}

TEST_F(TimelineTest, EachTensorGetsOneRowInFirstUseOrder) {
  Timeline t;
  t.start(path(), false);
  for (int step = 0; step < 3; ++step) {
    recordTensor(t, "first");
    recordTensor(t, "second");
    recordTensor(t, "third");
  }
  t.stop();
  std::vector<Json> all = events(path());
  EXPECT_EQ(pidOf(all, "first"), 1);
  EXPECT_EQ(pidOf(all, "second"), 2);
  EXPECT_EQ(pidOf(all, "third"), 3);
  std::map<std::pair<std::string, int>, int> metadata;  // (name, pid) -> count
  for (const Json& e : withPhase(all, "M")) {
    ++metadata[{e.getString("name"), static_cast<int>(e.getNumber("pid"))}];
    if (e.getString("name") == "process_sort_index") {
      EXPECT_EQ(e.get("args")->getNumber("sort_index"), e.getNumber("pid"));
    }
  }
  for (int pid = 0; pid <= 3; ++pid) {
    EXPECT_EQ((metadata[{"process_name", pid}]), 1) << pid;
    EXPECT_EQ((metadata[{"process_sort_index", pid}]), 1) << pid;
  }
  EXPECT_EQ(metadata.size(), 8u);
  for (const Json& e : all) {
    if (e.getString("ph") != "M") {
      EXPECT_GE(e.getNumber("pid"), 1);
    }
  }
}

TEST_F(TimelineTest, CycleMarkersOnlyWhenMarkCycles) {
  auto cycles = [](const std::vector<Json>& all) {
    std::vector<Json> out;
    for (const Json& e : all) {
      if (e.getString("name") == "CYCLE_START") out.push_back(e);
    }
    return out;
  };
  Timeline t;
  t.start(path(), false);
  EXPECT_FALSE(t.markCycles());
  for (int i = 0; i < 3; ++i) t.cycleStart();
  t.stop();
  EXPECT_TRUE(cycles(events(path())).empty());

  t.start(path(), true);
  EXPECT_TRUE(t.markCycles());
  for (int i = 0; i < 3; ++i) {
    t.cycleStart();
    recordTensor(t, "t");
  }
  t.stop();
  std::vector<Json> marks = cycles(events(path()));
  ASSERT_EQ(marks.size(), 3u);
  for (const Json& m : marks) {
    EXPECT_EQ(m.getString("ph"), "i");
    EXPECT_EQ(m.getString("s"), "g");
    EXPECT_GE(m.getNumber("ts"), 0);
  }
}

TEST_F(TimelineTest, RestartGivesAFreshFile) {
  Timeline t;
  t.start(path(), false);
  for (int i = 0; i < 50; ++i) recordTensor(t, "old" + std::to_string(i));
  t.stop();
  size_t oldSize = readFile(path()).size();

  t.start(path(), false);  // same path: truncated
  recordTensor(t, "new");
  t.stop();
  std::vector<Json> all = events(path());
  EXPECT_LT(readFile(path()).size(), oldSize);
  EXPECT_EQ(pidOf(all, "old0"), -1);
  EXPECT_EQ(pidOf(all, "new"), 1);  // pids start over
  int headers = 0;
  for (const Json& e : all) headers += e.get("args") && e.get("args")->get("start_time_since_epoch_in_micros");
  EXPECT_EQ(headers, 1);

  // Starting while active completes the first file and moves on.
  t.start(path("a.json"), false);
  t.opStart("in_a", "ALLREDUCE");  // left open: still a valid file
  t.start(path("b.json"), false);
  recordTensor(t, "in_b");
  t.stop();
  std::vector<Json> a = events(path("a.json"));
  std::vector<Json> b = events(path("b.json"));
  EXPECT_EQ(pidOf(a, "in_a"), 1);
  EXPECT_EQ(pidOf(b, "in_a"), -1);
  EXPECT_EQ(pidOf(b, "in_b"), 1);
  expectBalanced(b);
}

TEST_F(TimelineTest, UnopenablePathThrowsNamingIt) {
  Timeline t;
  std::string bad = path("no_such_dir") + "/timeline.json";
  try {
    t.start(bad, false);
    FAIL() << "start() accepted " << bad;
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(bad), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  EXPECT_FALSE(t.active());

  // A failed start while active leaves the previous file complete, and the timeline inactive.
  t.start(path(), false);
  recordTensor(t, "kept");
  EXPECT_THROW(t.start(dir_.string(), false), InvalidArgument);  // a directory
  EXPECT_FALSE(t.active());
  EXPECT_EQ(pidOf(events(path()), "kept"), 1);
}

TEST_F(TimelineTest, ConcurrentEventsWhileStartStopToggles) {
  Timeline t;
  std::atomic<bool> done{false};
  auto engine = [&](const std::string& prefix) {
    for (int i = 0; !done.load(); ++i) {
      std::string name = prefix + std::to_string(i % 7);
      if (t.active()) recordTensor(t, name);
      t.cycleStart();
      if (i % 64 == 0) t.flush();
    }
  };
  std::thread a(engine, "a"), b(engine, "b");
  for (int round = 0; round < 20; ++round) {
    t.start(path(round % 2 ? "odd.json" : "even.json"), round % 3 == 0);
    std::this_thread::sleep_for(2ms);
    if (round % 4 == 0) t.flush();
    if (round % 5 != 4) t.stop();  // sometimes restart without stopping
  }
  done = true;
  a.join();
  b.join();
  t.stop();
  events(path("odd.json"));  // both complete and valid (ops may be cut open by stop)
  events(path("even.json"));
  expectPythonAccepts(path("odd.json"));
}

TEST_F(TimelineTest, HundredThousandEventsAllLand) {
  Timeline t;
  t.start(path(), false);
  constexpr int kOps = 25000;  // 4 events each; passes the 1 MiB threshold several times
  for (int i = 0; i < kOps; ++i) {
    std::string name = "grad_" + std::to_string(i % 10);
    t.opStart(name, "ALLREDUCE");
    t.activityStart(name, "TCP_RING_ALLREDUCE");
    t.activityEnd(name);
    t.opEnd(name, "float32", {i});
  }
  t.stop();
  std::vector<Json> all = events(path());
  EXPECT_EQ(all.size(), 2u + 2 * 10 + 4u * kOps);
  EXPECT_EQ(withPhase(all, "B").size(), 2u * kOps);
  EXPECT_EQ(withPhase(all, "E").size(), 2u * kOps);
  expectBalanced(all);
  // The last op's shape made it: nothing at the tail was dropped.
  EXPECT_EQ(withPhase(all, "E").back().get("args")->getString("shape"), "[" + std::to_string(kOps - 1) + "]");
}

// A writer that cannot keep up (here: a 64 KiB cap against a burst of ~1 MB recorded between two
// of the writer's 100 ms ticks) costs events, never unbounded memory: the file stays valid JSON,
// every B it holds has its E, the gap is marked with the count, and recording resumes after.
TEST_F(TimelineTest, BufferIsCappedAndDroppedEventsAreMarked) {
  constexpr size_t kCap = 64 * 1024;
  Timeline t(kCap);
  t.start(path(), false);
  constexpr int kTensors = 5000;  // 12 events each (5 B, 2 X, 5 E), ~1 MB in all
  for (int i = 0; i < kTensors; ++i) recordTensor(t, "grad_" + std::to_string(i % 10));
  t.flush();
  recordTensor(t, "after_the_gap");
  t.stop();
  std::vector<Json> all = events(path());
  expectPythonAccepts(path());
  expectBalanced(all);
  std::vector<Json> marks;
  for (const Json& e : withPhase(all, "i")) {
    if (e.getString("name") == "TIMELINE_DROPPED_EVENTS") marks.push_back(e);
  }
  ASSERT_FALSE(marks.empty());
  double dropped = 0;
  for (const Json& m : marks) dropped += m.get("args")->getNumber("count");
  const size_t written = withPhase(all, "B").size() + withPhase(all, "X").size();
  EXPECT_GT(dropped, 0);
  EXPECT_LT(written, 7u * kTensors);  // 5 B + 2 X per tensor were offered
  EXPECT_GE(written + static_cast<size_t>(dropped), 7u * kTensors);
  EXPECT_GE(pidOf(all, "after_the_gap"), 1);
  EXPECT_EQ(withPhase(all, "B", pidOf(all, "after_the_gap")).size(), 5u);
}

}  // namespace
