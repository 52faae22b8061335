// Unit tests of the multi-host parts that need no process: hostfiles, the new options and their
// conflicts, the remote rank's environment, ssh's argv and the script handed to the remote
// shell, and the output forwarder's handshake / copy / last-line bookkeeping.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "launcher/host_list.h"
#include "launcher/launch_options.h"
#include "launcher/output_forwarder.h"
#include "launcher/rank_environment.h"
#include "launcher/remote_rank.h"
#include "launcher/store_address.h"
#include "launcher/subprocess.h"

namespace ringfold::launcher {
namespace {

using Args = std::vector<std::string>;
using testing::TempDir;

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

std::string usageErrorOf(const Args& args) {
  try {
    parseLaunchOptions(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::string hostfileErrorOf(const std::string& text) {
  try {
    parseHostfile(text, "hosts.txt");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::string writeFile(const TempDir& dir, const std::string& name, const std::string& text) {
  std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Hostfile, ParsesHorovodAndOpenMpiForms) {
  auto hosts = parseHostfile(
      "# cluster\n"
      "\n"
      "node1 slots=4\n"
      "   node2   slots=2   # two GPUs\n"
      "node3\n"
      "10.0.0.7:3\n"
      "node4 slots=1 max_slots=8\r\n",
      "hosts.txt");
  ASSERT_EQ(hosts.size(), 5u);
  const std::pair<const char*, int> want[] = {{"node1", 4}, {"node2", 2}, {"node3", 1}, {"10.0.0.7", 3}, {"node4", 1}};
  for (size_t i = 0; i < hosts.size(); ++i) {
    EXPECT_EQ(hosts[i].host, want[i].first);
    EXPECT_EQ(hosts[i].slots, want[i].second);
  }
}

TEST(Hostfile, BadLinesNameFileAndLine) {
  EXPECT_TRUE(has(hostfileErrorOf("a slots=2\nb slots=x\n"), "hosts.txt:2: slots expects a positive integer, got 'x'"))
      << hostfileErrorOf("a slots=2\nb slots=x\n");
  EXPECT_TRUE(has(hostfileErrorOf("a slots=0\n"), "hosts.txt:1: slots must be at least 1"));
  EXPECT_TRUE(has(hostfileErrorOf("# c\n\na gpus=2\n"), "hosts.txt:3: unexpected 'gpus=2'"));
  EXPECT_TRUE(has(hostfileErrorOf("a slots=2 slots=3\n"), "hosts.txt:1: unexpected 'slots=3'"));
  EXPECT_TRUE(has(hostfileErrorOf("a:2 slots=3\n"), "hosts.txt:1: unexpected 'slots=3'"));
  EXPECT_TRUE(has(hostfileErrorOf("a:x\n"), "hosts.txt:1: slots of 'a:x'"));
  EXPECT_TRUE(has(hostfileErrorOf("a\nb\na slots=2\n"), "hosts.txt:3 lists host 'a' more than once"));
  EXPECT_TRUE(has(hostfileErrorOf("-oProxyCommand=x\n"), "hosts.txt:1: host name '-oProxyCommand=x' may not start with '-'"));
  EXPECT_TRUE(has(hostfileErrorOf("# only comments\n\n"), "hostfile hosts.txt lists no host"));
  EXPECT_TRUE(has(hostfileErrorOf(":4\n"), "hosts.txt:1 has no host name"));
  EXPECT_TRUE(has(hostfileErrorOf("a;rm slots=1\n"), "is not a host name"));
}

TEST(Hostfile, FromTheCommandLine) {
  TempDir dir;
  std::string good = writeFile(dir, "good", "n1 slots=2\nn2 slots=2\n");
  auto o = parseLaunchOptions(Args{"-np", "3", "--hostfile", good, "cmd"});
  ASSERT_EQ(o.hosts.size(), 2u);
  EXPECT_EQ(o.hosts[1].host, "n2");
  EXPECT_TRUE(o.hostsGiven);
  EXPECT_EQ(o.hostfile, good);
  EXPECT_TRUE(has(usageErrorOf({"-np", "5", "--hostfile", good, "cmd"}),
                  "-np 5 is more than the 4 slot(s) given by --hostfile"));
  std::string bad = writeFile(dir, "bad", "n1 slots=2\n\nn2 slotz=2\n");
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--hostfile=" + bad, "cmd"}), bad + ":3: unexpected 'slotz=2'"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--hostfile", dir.path() + "/missing", "cmd"}),
                  "cannot read hostfile '" + dir.path() + "/missing'"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "-H", "a:1", "--hostfile", good, "cmd"}),
                  "-H and --hostfile both give the hosts; use one"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--hostfile", good, "-H", "a:1", "cmd"}),
                  "-H and --hostfile both give the hosts; use one"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "-H", "a:1", "-H", "b:1", "cmd"}), "-H is given twice"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--hostfile", good, "--hostfile", good, "cmd"}),
                  "--hostfile is given twice"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--hostfile"}), "option '--hostfile' expects a value"));
}

TEST(LaunchOptions, MultiHostOptions) {
  auto o = parseLaunchOptions(Args{"-np", "4", "-H", "a:2,b:2", "--ssh-port", "2222", "-i", "/k",
                                   "--ssh-option", "UserKnownHostsFile=/kh", "--ssh-option=Foo=bar",
                                   "--network-interface", "eth0,ib0", "--output-filename", "/tmp/logs",
                                   "cmd"});
  EXPECT_EQ(o.sshPort, 2222);
  EXPECT_EQ(o.sshIdentityFile, "/k");
  EXPECT_EQ(o.sshOptions, (Args{"UserKnownHostsFile=/kh", "Foo=bar"}));
  EXPECT_EQ(o.networkInterfaces, "eth0,ib0");
  EXPECT_EQ(o.outputDir, "/tmp/logs");
  EXPECT_EQ(parseLaunchOptions(Args{"-np", "1", "-p", "22", "--network-interfaces=eth1", "cmd"}).networkInterfaces, "eth1");
  EXPECT_EQ(parseLaunchOptions(Args{"-np", "1", "--ssh-identity-file=/x", "cmd"}).sshIdentityFile, "/x");

  EXPECT_TRUE(parseLaunchOptions(Args{"--check-build"}).checkBuild);
  EXPECT_TRUE(parseLaunchOptions(Args{"-cb", "-np", "0"}).checkBuild);  // wins, as -h does
  EXPECT_TRUE(has(usageText(), "--hostfile"));
  EXPECT_TRUE(has(usageText(), "--check-build"));
}

TEST(LaunchOptions, BadMultiHostOptionsAreNamed) {
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--ssh-port", "0", "a"}), "--ssh-port must be at least 1"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--ssh-port", "ssh", "a"}), "--ssh-port expects a positive integer, got 'ssh'"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--ssh-port", "70000", "a"}), "--ssh-port must be a TCP port"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--ssh-identity-file=", "a"}), "--ssh-identity-file expects a file name"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--ssh-option", "-v", "a"}), "--ssh-option expects an ssh option"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--network-interface", "^lo", "a"}), "--network-interface expects interface names"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--network-interface", "eth0,", "a"}), "'eth0,'"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--output-filename=", "a"}), "--output-filename expects a directory"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "-H", "-oProxyCommand=x:1", "a"}), "may not start with '-'"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "-H", "a b:1", "a"}), "is not a host name"));
  EXPECT_TRUE(has(usageErrorOf({"-np", "1", "--check-build=1", "a"}), "takes no value"));
}

TEST(RankEnvironment, RemoteRanksGetTheJobsVariablesOnly) {
  LaunchOptions o = parseLaunchOptions(Args{"-np", "2", "-H", "a:1,b:1", "-x", "FOO=new", "-x", "KEEP",
                                            "-x", "ABSENT", "--network-interface", "eth0",
                                            "--start-timeout", "5", "cmd"});
  RankSlot slot{{1, 2, 0, 1, 1, 2}, "b", false};
  StoreEndpoint store{"10.0.0.1", 4242, "c0ffee"};
  auto env = buildRemoteEnvironment({"FOO=old", "KEEP=kept", "PATH=/launcher/bin", "HOME=/root",
                                     "RINGFOLD_LOG_LEVEL=debug", "HOROVOD_FUSION_THRESHOLD=1",
                                     "RINGFOLD_RANK=99"},
                                    o, slot, store);
  auto get = [&](const char* n) { return findEnv(env, n).value_or("<unset>"); };
  EXPECT_EQ(get("FOO"), "new");
  EXPECT_EQ(get("KEEP"), "kept");          // bare -x: the launcher's value travels
  EXPECT_EQ(get("ABSENT"), "<unset>");     // ...when it has one
  EXPECT_EQ(get("PATH"), "<unset>");       // the remote login's PATH, as with mpirun
  EXPECT_EQ(get("HOME"), "<unset>");
  EXPECT_EQ(get("RINGFOLD_LOG_LEVEL"), "debug");  // the job's tunables travel
  EXPECT_EQ(get("HOROVOD_FUSION_THRESHOLD"), "1");
  EXPECT_EQ(get("RINGFOLD_RANK"), "1");
  EXPECT_EQ(get("HOROVOD_CROSS_RANK"), "1");
  EXPECT_EQ(get("RINGFOLD_CROSS_SIZE"), "2");
  EXPECT_EQ(get("HOROVOD_HOSTNAME"), "b");
  EXPECT_EQ(get("RINGFOLD_STORE_ADDR"), "10.0.0.1");
  EXPECT_EQ(get("RINGFOLD_SECRET"), "c0ffee");
  EXPECT_EQ(get("RINGFOLD_STORE_SERVER"), "external");
  EXPECT_EQ(get("RINGFOLD_SOCKET_IFNAME"), "=eth0");
  EXPECT_EQ(get("RINGFOLD_START_TIMEOUT"), "5");
  EXPECT_EQ(get("PYTHONUNBUFFERED"), "1");
  // Local ranks of the same job get the interface too.
  auto local = buildRankEnvironment({}, o, RankSlot{}, store);
  EXPECT_EQ(findEnv(local, "RINGFOLD_SOCKET_IFNAME").value_or(""), "=eth0");
}

TEST(RemoteRank, SshArgvPutsUserOptionsFirstAndTheHostLast) {
  SshSettings s{2222, "/keys/id", {"UserKnownHostsFile=/kh", "StrictHostKeyChecking=yes"}, 7.5};
  auto argv = sshArgv("/usr/bin/ssh", s, "node2", "abc123");
  std::string joined;
  for (const auto& a : argv) joined += a + "|";
  EXPECT_EQ(argv[0], "/usr/bin/ssh");
  EXPECT_TRUE(has(joined, "-o|UserKnownHostsFile=/kh|-o|StrictHostKeyChecking=yes|-o|BatchMode=yes|"
                          "-o|StrictHostKeyChecking=accept-new|-o|ConnectTimeout=8|-o|ServerAliveInterval=3|"
                          "-o|ServerAliveCountMax=3|-o|LogLevel=ERROR|-T|-p|2222|-i|/keys/id|--|node2|"))
      << joined;
  EXPECT_EQ(argv.back(), remoteBootstrapCommand("abc123"));
  auto plain = sshArgv("ssh", SshSettings{}, "h", "n");
  for (const auto& a : plain) {
    EXPECT_NE(a, "-p");
    EXPECT_NE(a, "-i");
  }
}

TEST(RemoteRank, BootstrapCommandIsSafeForEveryLoginShellAndHoldsNoSecret) {
  std::string cmd = remoteBootstrapCommand("0123abcd");
  ASSERT_TRUE(cmd.rfind("exec /bin/sh -c '", 0) == 0) << cmd;
  ASSERT_EQ(cmd.back(), '\'');
  std::string inner = cmd.substr(17, cmd.size() - 18);
  EXPECT_EQ(inner.find('\''), std::string::npos);
  EXPECT_EQ(inner.find('\n'), std::string::npos);
  EXPECT_EQ(inner.find('!'), std::string::npos);
  EXPECT_TRUE(has(inner, endMarker("0123abcd")));
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(shellQuote(""), "''");
}

TEST(RemoteRank, ScriptExportsTheEnvironmentAndEndsWithTheMarker) {
  RemoteScriptInput in{{"RINGFOLD_SECRET=s3cr'et", "MULTI=a\nb", "BAD-NAME=x", "EMPTY="},
                       "/work dir", {"python3", "train.py", "--lr", "0.1"}, "node2", 2.5, "feed"};
  std::string s = remoteScript(in);
  EXPECT_TRUE(has(s, "export RINGFOLD_SECRET='s3cr'\\''et'\n"));
  EXPECT_TRUE(has(s, "export MULTI='a\nb'\n"));
  EXPECT_TRUE(has(s, "export EMPTY=''\n"));
  EXPECT_FALSE(has(s, "BAD-NAME"));
  EXPECT_TRUE(has(s, "cd -- '/work dir' ||"));
  EXPECT_TRUE(has(s, "setsid 'python3' 'train.py' '--lr' '0.1'"));
  EXPECT_TRUE(has(s, startedMarker("feed")));
  EXPECT_TRUE(has(s, "-lt 25 ]"));  // grace period in tenths
  EXPECT_TRUE(s.size() > 12 && s.substr(s.size() - endMarker("feed").size() - 1) == endMarker("feed") + "\n");
  // The secret appears once, in its export line.
  EXPECT_EQ(s.find("s3cr"), s.rfind("s3cr"));
}

TEST(StoreAddress, Choice) {
  EXPECT_EQ(chooseStoreAddress("", std::nullopt), "127.0.0.1");
  EXPECT_EQ(chooseStoreAddress("lo", std::nullopt), "127.0.0.1");
  EXPECT_EQ(chooseStoreAddress("no-such-if0,lo", std::nullopt), "127.0.0.1");
  EXPECT_THROW(chooseStoreAddress("no-such-if0", std::nullopt), UsageError);
  EXPECT_EQ(chooseStoreAddress("", std::string("127.0.0.1")), "127.0.0.1");  // the route to it
  EXPECT_EQ(resolveIPv4("10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(routeSourceAddress("127.0.0.5"), "127.0.0.1");
  EXPECT_EQ(interfaceAddress("lo").value_or(""), "127.0.0.1");
  EXPECT_FALSE(interfaceAddress("no-such-if0").has_value());
}

TEST(OutputForwarder, HandshakeCopyAndLastLine) {
  int out[2], err[2], sink[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  ASSERT_EQ(pipe(sink), 0);  // stands in for the launcher's stdout and stderr
  TempDir dir;
  std::string copyPath = dir.path() + "/copy";
  FILE* copy = std::fopen(copyPath.c_str(), "w");
  ASSERT_NE(copy, nullptr);
  std::vector<OutputForwarder::Source> sources = {
      {out[0], sink[1], "[0]<stdout>:", "#hello", dup(fileno(copy))},
      {err[0], sink[1], "[0]<stderr>:"}};
  std::fclose(copy);
  OutputForwarder f(std::move(sources));
  EXPECT_FALSE(f.started(0));
  const std::string text = "motd\n#hello\nfirst\n#hello\n";
  ASSERT_EQ(write(out[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ASSERT_EQ(write(err[1], "oops\nlast words\n", 16), 16);
  close(out[1]);
  close(err[1]);
  for (int i = 0; i < 200 && !(f.finished(0) && f.finished(1)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(f.started(0));
  EXPECT_GT(f.startedAtNs(0), 0);
  EXPECT_TRUE(f.finished(0));
  EXPECT_EQ(f.lastLine(1), "last words");
  EXPECT_EQ(f.lastLine(0), "#hello");  // only the first handshake is swallowed
  f.stop(std::chrono::milliseconds(100));
  close(sink[1]);
  std::string forwarded;
  char buf[4096];
  for (ssize_t n; (n = read(sink[0], buf, sizeof buf)) > 0;) forwarded.append(buf, static_cast<size_t>(n));
  close(sink[0]);
  EXPECT_TRUE(has(forwarded, "[0]<stdout>:motd\n[0]<stdout>:first\n[0]<stdout>:#hello\n")) << forwarded;
  EXPECT_TRUE(has(forwarded, "[0]<stderr>:last words\n")) << forwarded;
  std::ifstream in(copyPath);
  std::string copied((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(copied, "motd\nfirst\n#hello\n");
}

// The launcher's stdout is a pipe nobody reads (tests/faults: stdout-blocked): the forwarder
// must keep draining the rank (whose writes would otherwise block for good), keep the
// --output-filename copy complete, and drop what the target cannot take, saying so.
TEST(OutputForwarder, AnUnreadTargetNeverBlocksTheRanks) {
  int out[2], sink[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(sink), 0);
  ASSERT_EQ(fcntl(out[1], F_SETFL, O_NONBLOCK), 0);  // the test's writes must not block either
  TempDir dir;
  std::string copyPath = dir.path() + "/copy";
  FILE* copy = std::fopen(copyPath.c_str(), "w");
  ASSERT_NE(copy, nullptr);
  std::vector<OutputForwarder::Source> sources = {{out[0], sink[1], "[0]<stdout>:", "", dup(fileno(copy))}};
  std::fclose(copy);
  OutputForwarder f(std::move(sources));
  const std::string line(99, 'x');
  const size_t total = 2 * OutputForwarder::kMaxPendingBytes;  // past the pipe and the buffer
  std::string text;
  while (text.size() < total) text += line + "\n";
  size_t sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (sent < text.size() && std::chrono::steady_clock::now() < deadline) {
    ssize_t n = write(out[1], text.data() + sent, std::min<size_t>(65536, text.size() - sent));
    if (n > 0) sent += static_cast<size_t>(n);
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(sent, text.size()) << "the forwarder stopped draining the rank";
  close(out[1]);
  for (int i = 0; i < 2000 && !f.finished(0); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(f.finished(0));
  // Now someone reads: what was kept arrives, and a line says how much was dropped.
  std::string forwarded;
  std::thread reader([&] {
    char buf[65536];
    for (ssize_t n; (n = read(sink[0], buf, sizeof buf)) > 0;) forwarded.append(buf, static_cast<size_t>(n));
  });
  f.stop(std::chrono::milliseconds(100));
  close(sink[1]);
  reader.join();
  close(sink[0]);
  EXPECT_LT(forwarded.size(), text.size() + text.size() / 5);
  EXPECT_TRUE(has(forwarded, "[0]<stdout>:" + line + "\n")) << forwarded.substr(0, 200);
  EXPECT_TRUE(has(forwarded, "ringfoldrun: dropped ")) << forwarded.substr(forwarded.size() - 300);
  std::ifstream in(copyPath);
  std::string copied((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(copied.size(), text.size());
}

}  // namespace
}  // namespace ringfold::launcher
