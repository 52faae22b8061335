// Unit tests of the launcher's pure parts: command line, rank layout, locality, rank
// environment, output line prefixing. Nothing here spawns a process.
#include <gtest/gtest.h>

#include "launcher/launch_options.h"
#include "launcher/output_forwarder.h"
#include "launcher/rank_environment.h"
#include "launcher/rank_layout.h"

namespace ringfold::launcher {
namespace {

using Args = std::vector<std::string>;

// The UsageError message for `args`, or "" if they parse.
std::string usageErrorOf(const Args& args) {
  try {
    parseLaunchOptions(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchOptions, CommandStartsAtFirstNonOptionAndIsUntouched) {
  auto o = parseLaunchOptions(Args{"-np", "2", "python", "train.py", "--lr", "0.1", "-x", "-np", "9"});
  EXPECT_EQ(o.numProc, 2);
  EXPECT_EQ(o.command, (Args{"python", "train.py", "--lr", "0.1", "-x", "-np", "9"}));
  EXPECT_TRUE(o.exports.empty());
  ASSERT_EQ(o.hosts.size(), 1u);  // default: localhost:np
  EXPECT_EQ(o.hosts[0].host, "localhost");
  EXPECT_EQ(o.hosts[0].slots, 2);
  EXPECT_FALSE(o.hostsGiven);
}

TEST(LaunchOptions, AllOptionsAndSpellings) {
  auto o = parseLaunchOptions(Args{"--num-proc=3", "-H", "localhost:4", "--start-timeout", "12.5",
                                   "--grace-period=0.25", "--verbose", "-x", "FOO=bar=baz", "-x",
                                   "HOME", "--", "-weird-command", "arg"});
  EXPECT_EQ(o.numProc, 3);
  ASSERT_EQ(o.hosts.size(), 1u);
  EXPECT_EQ(o.hosts[0].slots, 4);
  EXPECT_TRUE(o.hostsGiven);
  ASSERT_TRUE(o.startTimeoutSeconds.has_value());
  EXPECT_DOUBLE_EQ(*o.startTimeoutSeconds, 12.5);
  EXPECT_DOUBLE_EQ(o.gracePeriodSeconds, 0.25);
  EXPECT_TRUE(o.verbose);
  ASSERT_EQ(o.exports.size(), 2u);
  EXPECT_EQ(o.exports[0].name, "FOO");
  EXPECT_EQ(o.exports[0].value, std::optional<std::string>("bar=baz"));
  EXPECT_EQ(o.exports[1].name, "HOME");
  EXPECT_FALSE(o.exports[1].value.has_value());
  EXPECT_EQ(o.command, (Args{"-weird-command", "arg"}));

  EXPECT_EQ(parseLaunchOptions(Args{"-np=4", "--hosts=127.0.0.1:4", "a"}).numProc, 4);
  EXPECT_EQ(parseLaunchOptions(Args{"-n", "5", "a"}).numProc, 5);
  EXPECT_DOUBLE_EQ(parseLaunchOptions(Args{"-np", "1", "a"}).gracePeriodSeconds, 3.0);
  EXPECT_EQ(parseLaunchOptions(Args{"-np", "1", "a"}).bindTo, BindPolicy::kAuto);
  EXPECT_EQ(parseLaunchOptions(Args{"-np", "1", "--bind-to", "auto", "a"}).bindTo, BindPolicy::kAuto);
  EXPECT_EQ(parseLaunchOptions(Args{"-np", "1", "--bind-to", "none", "a"}).bindTo, BindPolicy::kNone);
  EXPECT_EQ(parseLaunchOptions(Args{"-np", "1", "--bind-to=core", "a"}).bindTo, BindPolicy::kCore);
}

TEST(LaunchOptions, HelpAndVersionNeedNothingElse) {
  EXPECT_TRUE(parseLaunchOptions(Args{"-h"}).help);
  EXPECT_TRUE(parseLaunchOptions(Args{"--help", "-np", "0"}).help);
  EXPECT_TRUE(parseLaunchOptions(Args{"--version"}).version);
  EXPECT_TRUE(parseLaunchOptions(Args{"-v"}).version);
  EXPECT_NE(usageText().find("-np"), std::string::npos);
}

TEST(LaunchOptions, BadNumProcIsNamed) {
  EXPECT_NE(usageErrorOf({"python", "x.py"}).find("missing -np"), std::string::npos);
  EXPECT_NE(usageErrorOf({}).find("missing -np"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "0", "a"}).find("-np must be at least 1, got 0"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "-3", "a"}).find("-np must be at least 1, got -3"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "two", "a"}).find("-np expects a positive integer, got 'two'"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2x", "a"}).find("'2x'"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np"}).find("option '-np' expects a value"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "99999999999", "a"}).find("positive integer"), std::string::npos);
}

TEST(LaunchOptions, BadHostsAndSlotsAreNamed) {
  EXPECT_NE(usageErrorOf({"-np", "5", "-H", "localhost:4", "a"})
                .find("-np 5 is more than the 4 slot(s) given by -H"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "-H", "localhost", "a"}).find("more than the 1 slot"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "1", "-H", "localhost:0", "a"}).find("slots must be at least 1"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "1", "-H", "localhost:x", "a"}).find("'localhost:x'"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "1", "-H", "a:1,,b:1", "a"}).find("empty host entry"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "1", "-H", ":3", "a"}).find("has no host name"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "1", "-H", "a:1,a:2", "a"}).find("host 'a' more than once"),
            std::string::npos);
}

TEST(LaunchOptions, OtherBadInputIsNamed) {
  EXPECT_NE(usageErrorOf({"-np", "2", "--frobnicate", "a"}).find("unknown option '--frobnicate'"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2"}).find("no command given"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--"}).find("no command given"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--verbose=1", "a"}).find("'--verbose' takes no value"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "-x", "1BAD=2", "a"}).find("'1BAD=2'"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "-x", "=v", "a"}).find("-x expects VAR"), std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--start-timeout", "-1", "a"}).find("--start-timeout"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--grace-period", "soon", "a"}).find("--grace-period"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--bind-to", "socket", "a"}).find("--bind-to expects auto, core or none, got 'socket'"),
            std::string::npos);
}

// --failure-grace: seconds (0 allowed), unset by default (RINGFOLD_FAILURE_GRACE then decides,
// job.h), and refused in elastic mode, where a failed worker does not stop the others.
TEST(LaunchOptions, FailureGrace) {
  EXPECT_FALSE(parseLaunchOptions(Args{"-np", "2", "a"}).failureGraceSeconds.has_value());
  auto o = parseLaunchOptions(Args{"-np", "2", "--failure-grace", "0.5", "a"});
  ASSERT_TRUE(o.failureGraceSeconds.has_value());
  EXPECT_DOUBLE_EQ(*o.failureGraceSeconds, 0.5);
  o = parseLaunchOptions(Args{"-np", "2", "--failure-grace=0", "a"});
  ASSERT_TRUE(o.failureGraceSeconds.has_value());
  EXPECT_DOUBLE_EQ(*o.failureGraceSeconds, 0.0);
  EXPECT_NE(usageErrorOf({"-np", "2", "--failure-grace", "-1", "a"})
                .find("--failure-grace expects a number of seconds (0 or more), got '-1'"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "--failure-grace", "2", "--host-discovery-script=/bin/true", "a"})
                .find("--failure-grace is not for elastic jobs"),
            std::string::npos);
  EXPECT_NE(usageText().find("--failure-grace S"), std::string::npos);
}

TEST(RankLayout, FillsHostsInOrderWithHorovodCrossRanks) {
  auto slots = computeRankLayout({{"a", 2}, {"b", 2}, {"c", 4}}, 5);
  ASSERT_EQ(slots.size(), 5u);
  // rank: host localRank localSize crossRank crossSize
  struct Want { const char* host; int lr, ls, cr, cs; };
  const Want want[] = {{"a", 0, 2, 0, 3}, {"a", 1, 2, 0, 2}, {"b", 0, 2, 1, 3},
                       {"b", 1, 2, 1, 2}, {"c", 0, 1, 2, 3}};
  for (int r = 0; r < 5; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(slots[r].rank, r);
    EXPECT_EQ(slots[r].size, 5);
    EXPECT_EQ(slots[r].host, want[r].host);
    EXPECT_EQ(slots[r].localRank, want[r].lr);
    EXPECT_EQ(slots[r].localSize, want[r].ls);
    EXPECT_EQ(slots[r].crossRank, want[r].cr);
    EXPECT_EQ(slots[r].crossSize, want[r].cs);
  }
  EXPECT_THROW(computeRankLayout({{"a", 2}}, 3), UsageError);
}

// -H a:1,b:2: the layout tests/collectives/topology_test.cc gives describeHosts (the cross rank
// of rank 2 is 0, like rank 0's, although they run on different hosts).
TEST(RankLayout, UnevenHostsShareCrossRanks) {
  auto slots = computeRankLayout({{"a", 1}, {"b", 2}}, 3);
  ASSERT_EQ(slots.size(), 3u);
  const int want[3][6] = {{0, 3, 0, 1, 0, 2}, {1, 3, 0, 2, 1, 2}, {2, 3, 1, 2, 0, 1}};
  for (int r = 0; r < 3; ++r) {
    const Topology& t = slots[r];
    EXPECT_EQ(std::vector<int>({t.rank, t.size, t.localRank, t.localSize, t.crossRank, t.crossSize}),
              std::vector<int>(want[r], want[r] + 6)) << "rank " << r;
  }
}

TEST(RankLayout, SingleHost) {
  auto slots = computeRankLayout({{"localhost", 8}}, 3);
  ASSERT_EQ(slots.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(slots[r].localRank, r);
    EXPECT_EQ(slots[r].localSize, 3);
    EXPECT_EQ(slots[r].crossRank, 0);
    EXPECT_EQ(slots[r].crossSize, 1);
  }
}

TEST(RankLayout, OnlyThisMachineIsLocal) {
  EXPECT_TRUE(isLocalHost("localhost", "node1.example.org"));
  EXPECT_TRUE(isLocalHost("127.0.0.1", "node1"));
  EXPECT_TRUE(isLocalHost("127.0.1.1", "node1"));
  EXPECT_TRUE(isLocalHost("node1", "node1.example.org"));
  EXPECT_TRUE(isLocalHost("node1.example.org", "node1"));
  EXPECT_TRUE(isLocalHost("node1.example.org", "node1.example.org"));
  EXPECT_FALSE(isLocalHost("node2", "node1"));
  EXPECT_FALSE(isLocalHost("node1.other.org", "node1.example.org"));
  EXPECT_FALSE(isLocalHost("10.0.0.1", "node1"));
  EXPECT_FALSE(isLocalHost("10.0.0.1", "10"));  // an address is never a short hostname
  EXPECT_FALSE(isLocalHost("node1", ""));
  // An address of one of this machine's interfaces is this machine.
  EXPECT_TRUE(isLocalHost("10.0.0.1", "node1", {"10.0.0.1", "fe80::1"}));
  EXPECT_TRUE(isLocalHost("fe80::1", "node1", {"10.0.0.1", "fe80::1"}));
  EXPECT_FALSE(isLocalHost("10.0.0.2", "node1", {"10.0.0.1"}));
  for (const auto& a : localAddresses()) EXPECT_FALSE(a.empty());
}

TEST(RankLayout, LocalHostFlagsAndSlots) {
  std::vector<HostSlots> hosts = {{"10.0.0.1", 2}, {"node7", 2}, {"node8", 1}};
  auto flags = localHostFlags(hosts, "node1", {"10.0.0.1"});
  EXPECT_EQ(flags, (std::vector<bool>{true, false, false}));
  auto slots = computeRankLayout(hosts, 5);
  markLocalSlots(slots, hosts, flags);
  const bool want[] = {true, true, false, false, false};
  for (int r = 0; r < 5; ++r) EXPECT_EQ(slots[r].local, want[r]) << r;
  try {
    localHostFlags({{"localhost", 2}, {"node7", 1}, {"127.0.0.1", 2}}, "node1", {});
    FAIL() << "this machine listed twice was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'localhost' and '127.0.0.1'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(localHostFlags({{"node1", 1}, {"10.0.0.1", 1}}, "node1", {"10.0.0.1"}), UsageError);
  EXPECT_NO_THROW(localHostFlags({{"a", 1}, {"b", 1}}, "node1", {}));  // all remote is fine
}

TEST(RankEnvironment, SetsIdentityStoreAndExports) {
  LaunchOptions o = parseLaunchOptions(Args{"-np", "4", "-x", "FOO=new", "-x", "KEEP",
                                            "--start-timeout", "7", "cmd"});
  RankSlot slot{{2, 4, 2, 4, 0, 1}, "localhost"};
  StoreEndpoint store{"127.0.0.1", 4242, "c0ffee"};
  auto env = buildRankEnvironment({"FOO=old", "KEEP=kept", "RINGFOLD_RANK=99", "PATH=/bin"}, o,
                                  slot, store);
  auto get = [&](const char* n) { return findEnv(env, n).value_or("<unset>"); };
  EXPECT_EQ(get("FOO"), "new");
  EXPECT_EQ(get("KEEP"), "kept");
  EXPECT_EQ(get("PATH"), "/bin");
  EXPECT_EQ(get("RINGFOLD_RANK"), "2");  // the launcher's values win over inherited ones
  EXPECT_EQ(get("RINGFOLD_SIZE"), "4");
  EXPECT_EQ(get("RINGFOLD_LOCAL_RANK"), "2");
  EXPECT_EQ(get("RINGFOLD_LOCAL_SIZE"), "4");
  EXPECT_EQ(get("RINGFOLD_CROSS_RANK"), "0");
  EXPECT_EQ(get("RINGFOLD_CROSS_SIZE"), "1");
  EXPECT_EQ(get("HOROVOD_RANK"), "2");
  EXPECT_EQ(get("HOROVOD_SIZE"), "4");
  EXPECT_EQ(get("HOROVOD_LOCAL_RANK"), "2");
  EXPECT_EQ(get("HOROVOD_LOCAL_SIZE"), "4");
  EXPECT_EQ(get("HOROVOD_CROSS_RANK"), "0");
  EXPECT_EQ(get("HOROVOD_CROSS_SIZE"), "1");
  EXPECT_EQ(get("HOROVOD_HOSTNAME"), "localhost");
  EXPECT_EQ(get("RINGFOLD_STORE_ADDR"), "127.0.0.1");
  EXPECT_EQ(get("RINGFOLD_STORE_PORT"), "4242");
  EXPECT_EQ(get("RINGFOLD_SECRET"), "c0ffee");
  EXPECT_EQ(get("RINGFOLD_STORE_SERVER"), "external");  // the launcher hosts it, not rank 0
  EXPECT_EQ(get("RINGFOLD_START_TIMEOUT"), "7");
  EXPECT_EQ(get("PYTHONUNBUFFERED"), "1");
  int rankEntries = 0;
  for (const auto& e : env) rankEntries += e.rfind("RINGFOLD_RANK=", 0) == 0 ? 1 : 0;
  EXPECT_EQ(rankEntries, 1);

  LaunchOptions plain = parseLaunchOptions(Args{"-np", "1", "cmd"});
  auto env2 = buildRankEnvironment({}, plain, RankSlot{}, store);
  EXPECT_FALSE(findEnv(env2, "RINGFOLD_START_TIMEOUT").has_value());
}

TEST(LinePrefixer, EmitsOnlyWholeLines) {
  LinePrefixer p("[1]<stdout>:");
  std::string out;
  p.feed("hel", 3, out);
  EXPECT_EQ(out, "");
  p.feed("lo\nwor", 6, out);
  EXPECT_EQ(out, "[1]<stdout>:hello\n");
  out.clear();
  p.feed("ld\n\nx\n", 6, out);
  EXPECT_EQ(out, "[1]<stdout>:world\n[1]<stdout>:\n[1]<stdout>:x\n");
  out.clear();
  p.feed("tail", 4, out);
  p.finish(out);
  EXPECT_EQ(out, "[1]<stdout>:tail\n");
  out.clear();
  p.finish(out);  // nothing pending: nothing emitted
  EXPECT_EQ(out, "");
}

TEST(LinePrefixer, CutsOverlongLines) {
  LinePrefixer p("P:", 4);
  std::string out;
  p.feed("abcdefghij\nxy", 13, out);
  EXPECT_EQ(out, "P:abcd\nP:efgh\nP:ij\n");
  out.clear();
  p.feed("zw", 2, out);  // exactly full: cut only if more than a newline follows
  EXPECT_EQ(out, "");
  p.feed("\n", 1, out);
  EXPECT_EQ(out, "P:xyzw\n");
}

}  // namespace
}  // namespace ringfold::launcher
