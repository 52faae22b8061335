#include "launcher/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ringfold::launcher::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::vector<std::string>& extraEnv) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& x : extraEnv) env.push_back(x);
  std::vector<char*> cArgv, cEnv;
  for (const auto& a : argv) cArgv.push_back(const_cast<char*>(a.c_str()));
  cArgv.push_back(nullptr);
  for (const auto& e : env) cEnv.push_back(const_cast<char*>(e.c_str()));
  cEnv.push_back(nullptr);

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  start_ = Clock::now();
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork");
  if (pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    int devNull = open("/dev/null", O_RDONLY);
    dup2(devNull, STDIN_FILENO);
    execve(cArgv[0], cArgv.data(), cEnv.data());
    _exit(126);
  }
  close(out[1]);
  close(err[1]);
  outFd_ = out[0];
  errFd_ = err[0];
}

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (outFd_ >= 0) close(outFd_);
  if (errFd_ >= 0) close(errFd_);
}

void Subprocess::signal(int sig) const {
  if (pid_ > 0) kill(pid_, sig);
}

Finished Subprocess::finish(std::chrono::milliseconds timeout) {
  Finished f;
  const auto deadline = Clock::now() + timeout;
  std::string* sinks[2] = {&f.out, &f.err};
  int fds[2] = {outFd_, errFd_};
  char buf[65536];
  while (fds[0] >= 0 || fds[1] >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      f.timedOut = true;
      break;
    }
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    if (poll(p, 2, static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || p[i].revents == 0) continue;
      ssize_t n = read(fds[i], buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  outFd_ = fds[0];
  errFd_ = fds[1];
  // The pipes closed (or time ran out); now the exit status, still within the deadline.
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (f.timedOut || Clock::now() >= deadline) {
      f.timedOut = true;
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  f.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  f.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return f;
}

Finished run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
             const std::vector<std::string>& extraEnv) {
  Subprocess p(argv, extraEnv);
  return p.finish(timeout);
}

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "ringfoldrun_test.XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

bool processAlive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return false;
  // "pid (comm) S ...": the state follows the last ')'.
  auto paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() && content[paren + 2] != 'Z' &&
         content[paren + 2] != 'X';
}

std::vector<pid_t> waitForPidFiles(const std::string& dir, int count, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::vector<pid_t> pids;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().filename().string().rfind("pid.", 0) != 0) continue;
      std::ifstream in(entry.path());
      long v = 0;
      if (in >> v && v > 0) pids.push_back(static_cast<pid_t>(v));
    }
    if (static_cast<int>(pids.size()) >= count || Clock::now() >= deadline) return pids;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<pid_t> waitUntilDead(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::vector<pid_t> alive;
    for (pid_t p : pids) {
      if (processAlive(p)) alive.push_back(p);
    }
    if (alive.empty() || Clock::now() >= deadline) return alive;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

}  // namespace ringfold::launcher::testing
