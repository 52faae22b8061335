#include "launcher/rank_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/cpu_binding.h"
#include "launcher/rank_environment.h"

namespace ringfold::launcher {

namespace {

bool isExecutableFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Child side, after fork: async-signal-safe calls only. Never returns.
[[noreturn]] void execChild(pid_t parent, int inR, int outW, int errW, int statusW, const cpu_set_t* cpus,
                            const char* program, char* const* argv, char* const* envp) {
  auto fail = [statusW](int err) {
    // The parent reads errno from the status pipe; its write end closes on a successful exec.
    ssize_t unused = write(statusW, &err, sizeof err);
    (void)unused;
    _exit(127);
  };
  if (setpgid(0, 0) != 0) fail(errno);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  if (getppid() != parent) _exit(137);  // the launcher died before PDEATHSIG was armed

  int in = inR >= 0 ? inR : open("/dev/null", O_RDONLY);
  if (in < 0) fail(errno);
  if (dup2(in, STDIN_FILENO) < 0 || dup2(outW, STDOUT_FILENO) < 0 ||
      dup2(errW, STDERR_FILENO) < 0) {
    fail(errno);
  }
  // Default dispositions and an empty mask: both survive exec, and the launcher blocks or
  // ignores several signals.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (cpus != nullptr) sched_setaffinity(0, sizeof(cpu_set_t), cpus);  // advice: a refusal is no failure

  execve(program, argv, envp);
  fail(errno);
  _exit(127);  // not reached: fail() exits
}

std::vector<char*> cStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::optional<std::string> resolveProgram(const std::string& name,
                                          const std::vector<std::string>& env) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    return isExecutableFile(name) ? std::optional<std::string>(name) : std::nullopt;
  }
  std::string path = findEnv(env, "PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    if (colon == std::string::npos) colon = path.size();
    std::string dir = path.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (isExecutableFile(candidate)) return candidate;
    start = colon + 1;
  }
  return std::nullopt;
}

RankProcess spawnRank(int rank, const std::string& program, const std::vector<std::string>& argv,
                      const std::vector<std::string>& env, bool stdinPipe, const std::vector<int>& cpus) {
  int inPipe[2] = {-1, -1};
  if (stdinPipe) RF_CHECK_ERRNO(pipe2(inPipe, O_CLOEXEC), "stdin pipe for rank ", rank);
  auto closeIn = [&] {
    for (int fd : inPipe) {
      if (fd >= 0) close(fd);
    }
  };
  int outPipe[2], errPipe[2], statusPipe[2];
  if (pipe2(outPipe, O_CLOEXEC) != 0) {
    int e = errno;
    closeIn();
    errno = e;
    RF_CHECK_ERRNO(-1, "stdout pipe for rank ", rank);
  }
  if (pipe2(errPipe, O_CLOEXEC) != 0) {
    int e = errno;
    close(outPipe[0]);
    close(outPipe[1]);
    closeIn();
    errno = e;
    RF_CHECK_ERRNO(-1, "stderr pipe for rank ", rank);
  }
  if (pipe2(statusPipe, O_CLOEXEC) != 0) {
    int e = errno;
    for (int fd : {outPipe[0], outPipe[1], errPipe[0], errPipe[1]}) close(fd);
    closeIn();
    errno = e;
    RF_CHECK_ERRNO(-1, "exec-status pipe for rank ", rank);
  }
  // Everything the child touches is prepared before fork (no allocation after it).
  std::vector<char*> cArgv = cStrings(argv);
  std::vector<char*> cEnv = cStrings(env);
  const cpu_set_t cpuSet = cpuSetOf(cpus);
  const pid_t parent = getpid();

  pid_t pid = fork();
  if (pid == 0) {
    execChild(parent, inPipe[0], outPipe[1], errPipe[1], statusPipe[1], cpus.empty() ? nullptr : &cpuSet,
              program.c_str(), cArgv.data(), cEnv.data());
  }
  int forkErrno = errno;
  close(outPipe[1]);
  close(errPipe[1]);
  close(statusPipe[1]);
  if (inPipe[0] >= 0) close(inPipe[0]);
  inPipe[0] = -1;
  if (pid < 0) {
    for (int fd : {outPipe[0], errPipe[0], statusPipe[0]}) close(fd);
    closeIn();
    errno = forkErrno;
    RF_CHECK_ERRNO(-1, "fork for rank ", rank);
  }
  // Also from this side, so that signalGroup(pid) works before the child gets to run.
  // EACCES (child already exec'd, having set it itself) is fine.
  setpgid(pid, pid);

  int childErrno = 0;
  ssize_t n;
  do {
    n = read(statusPipe[0], &childErrno, sizeof childErrno);
  } while (n < 0 && errno == EINTR);
  close(statusPipe[0]);
  if (n > 0) {
    // exec (or the set-up before it) failed; the child has exited with 127.
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    close(outPipe[0]);
    close(errPipe[0]);
    closeIn();
    throw SpawnError("cannot execute '" + program + "': " + std::strerror(childErrno));
  }
  if (inPipe[1] >= 0) fcntl(inPipe[1], F_SETFL, O_NONBLOCK);
  return RankProcess{rank, pid, outPipe[0], errPipe[0], inPipe[1]};
}

bool signalGroup(pid_t pgid, int sig) {
  if (pgid <= 0) return false;  // never kill(0) or kill(-1)
  return kill(-pgid, sig) == 0;
}

}  // namespace ringfold::launcher
