#include "netns/netns_cluster.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace ringfold::launcher::testing {

namespace fs = std::filesystem;

namespace {

const char* ipTool() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "ip";
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

int NetnsCluster::shell(const std::string& command) {
  int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::string NetnsCluster::skipReason() {
  if (geteuid() != 0) return "needs root (network namespaces, veth links, sshd)";
  if (access("/usr/sbin/sshd", X_OK) != 0) {
    return "needs /usr/sbin/sshd (Debian's openssh-server; scripts/install_deps.sh installs it)";
  }
  if (access("/usr/bin/ssh", X_OK) != 0 && access("/bin/ssh", X_OK) != 0) return "needs ssh (openssh-client)";
  if (access("/usr/bin/ssh-keygen", X_OK) != 0) return "needs ssh-keygen (openssh-client)";
  const std::string probe = "rnprobe" + std::to_string(getpid() % 100000);
  const std::string ip = ipTool();
  if (shell(ip + " netns add " + probe + " >/dev/null 2>&1") != 0) {
    return "cannot create network namespaces here (`ip netns add` failed)";
  }
  bool veth = shell(ip + " -n " + probe + " link add rnprobev type veth peer name rnprobep >/dev/null 2>&1") == 0;
  shell(ip + " netns del " + probe + " >/dev/null 2>&1");
  if (!veth) return "cannot create veth links in a network namespace";
  return "";
}

void NetnsCluster::up() {
  prefix_ = "rn" + std::to_string(getpid() % 1000000);
  std::string tmpl = (fs::temp_directory_path() / "ringfold_netns.XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
  dir_ = tmpl + "/c";

  // The reaper: tears the cluster down once this process is gone, however it ends.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  const std::string script = CLUSTER_SH_PATH;
  // Orphans (the daemonized sshds, remote shells whose session ended) become our children,
  // so down() can reap them instead of leaving zombies to an init that may not reap.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  pid_t pid = fork();
  if (pid == 0) {
    setsid();  // out of the suite's process group: ctest's kill does not reach it
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != fds[0]) close(fd);  // the write end too: only the suite may hold it
    }
    int devNull = open("/dev/null", O_RDWR);
    dup2(devNull, STDIN_FILENO);
    dup2(devNull, STDOUT_FILENO);
    dup2(devNull, STDERR_FILENO);
    char c;
    while (read(fds[0], &c, 1) != 0) {
    }
    execl("/bin/bash", "bash", "-c", "\"$0\" down \"$1\" \"$2\"; rmdir \"$3\" 2>/dev/null",
          script.c_str(), prefix_.c_str(), dir_.c_str(), tmpl.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[0]);
  reaperPid_ = pid;
  reaperPipe_ = fds[1];

  up_ = true;
  const std::string cmd = "bash " + script + " up " + prefix_ + " " + std::to_string(kHosts) + " " + dir_;
  if (shell(cmd) != 0) throw std::runtime_error("cluster.sh up failed: " + cmd);
}

void NetnsCluster::down() {
  if (!up_) return;
  up_ = false;
  shell("bash " + std::string(CLUSTER_SH_PATH) + " down " + prefix_ + " " + dir_);
  rmdir(fs::path(dir_).parent_path().c_str());
  if (reaperPipe_ >= 0) close(reaperPipe_);  // the reaper runs `down` again: a no-op now
  reaperPipe_ = -1;
  if (reaperPid_ > 0) waitpid(reaperPid_, nullptr, 0);
  reaperPid_ = -1;
  while (waitpid(-1, nullptr, WNOHANG) > 0) {  // orphans adopted as subreaper
  }
}

std::string NetnsCluster::sshdPid(int host) const {
  std::string pid = readFile(dir_ + "/h" + std::to_string(host) + "/sshd.pid");
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid;
}

std::vector<std::string> NetnsCluster::inHost(int host, std::vector<std::string> argv) const {
  argv.insert(argv.begin(), {ipTool(), "netns", "exec", ns(host)});
  return argv;
}

std::vector<std::string> NetnsCluster::sshOptions(const std::string& identity) const {
  return {"--ssh-port", "2222", "--ssh-identity-file", dir_ + "/" + identity,
          "--ssh-option", "UserKnownHostsFile=" + dir_ + "/known_hosts",
          "--ssh-option", "StrictHostKeyChecking=yes",
          "--ssh-option", "GlobalKnownHostsFile=/dev/null"};
}

std::vector<std::string> NetnsCluster::leftovers(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::vector<std::string> left;
    for (int h = 1; h <= kHosts; ++h) {
      const std::string sshd = sshdPid(h);
      std::string pids;
      {
        FILE* p = popen((std::string(ipTool()) + " netns pids " + ns(h) + " 2>/dev/null").c_str(), "r");
        char buf[256];
        while (p != nullptr && fgets(buf, sizeof buf, p) != nullptr) pids += buf;
        if (p != nullptr) pclose(p);
      }
      size_t start = 0;
      while (start < pids.size()) {
        size_t nl = pids.find('\n', start);
        if (nl == std::string::npos) nl = pids.size();
        std::string pid = pids.substr(start, nl - start);
        start = nl + 1;
        if (pid.empty() || pid == sshd) continue;
        std::string cmdline = readFile("/proc/" + pid + "/cmdline");
        if (cmdline.empty()) continue;  // gone meanwhile, or a zombie
        for (char& c : cmdline) c = c == '\0' ? ' ' : c;
        left.push_back("h" + std::to_string(h) + ": " + pid + " " + cmdline);
      }
    }
    if (left.empty() || std::chrono::steady_clock::now() >= deadline) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

NetnsCluster* gCluster = nullptr;

int runSuiteOnCluster(int argc, char** argv, const std::string& suite) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::string reason = NetnsCluster::skipReason();
  if (!reason.empty()) {
    std::printf("SKIPPED: the netns %s suite %s\n", suite.c_str(), reason.c_str());
    return 77;
  }
  NetnsCluster cluster;
  try {
    cluster.up();
  } catch (const std::exception& e) {
    std::printf("cannot build the emulated cluster: %s\n", e.what());
    return 1;
  }
  gCluster = &cluster;
  const int rc = RUN_ALL_TESTS();
  gCluster = nullptr;
  cluster.down();
  return rc;
}

}  // namespace ringfold::launcher::testing
