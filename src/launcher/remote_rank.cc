#include "launcher/remote_rank.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "launcher/output_forwarder.h"
#include "rendezvous/secret.h"

namespace ringfold::launcher {

namespace {

bool validEnvName(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string formatTenths(double seconds) {
  long tenths = std::lround(std::max(0.0, seconds) * 10);
  return std::to_string(std::max(1L, tenths));
}

}  // namespace

std::string newNonce() { return rendezvous::generateSecret().substr(0, 16); }

std::string startedMarker(const std::string& nonce) { return "#rf-started-" + nonce; }
std::string endMarker(const std::string& nonce) { return "#rf-end-" + nonce; }

std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string remoteBootstrapCommand(const std::string& nonce) {
  // Inside the single quotes: no single quote, no newline, no '!' and no backslash, so every
  // common login shell passes it to /bin/sh unchanged. `n` is a newline, made by printf.
  // A stdin that ends before the end marker (the launcher died) runs nothing.
  return "exec /bin/sh -c 'n=$(printf \"\\n_\"); n=${n%_}; r=; ok=; "
         "while IFS= read -r l; do if [ \"$l\" = \"" + endMarker(nonce) + "\" ]; then ok=1; break; fi; "
         "r=\"$r$l$n\"; done; [ -n \"$ok\" ] || exit 1; eval \"$r\"'";
}

std::vector<std::string> sshArgv(const std::string& ssh, const SshSettings& settings,
                                 const std::string& host, const std::string& nonce) {
  const double t = settings.startTimeoutSeconds;
  const int connectTimeout = std::max(1, static_cast<int>(std::ceil(t)));
  const int alive = std::clamp(static_cast<int>(std::ceil(t / 3)), 1, 10);
  std::vector<std::string> argv = {ssh};
  // ssh keeps the first value it is given for an option: the user's -o come first.
  for (const auto& o : settings.options) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  for (std::string o : {std::string("BatchMode=yes"), std::string("StrictHostKeyChecking=accept-new"),
                        "ConnectTimeout=" + std::to_string(connectTimeout),
                        "ServerAliveInterval=" + std::to_string(alive),
                        std::string("ServerAliveCountMax=3"), std::string("LogLevel=ERROR")}) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  argv.push_back("-T");
  if (settings.port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(settings.port));
  }
  if (!settings.identityFile.empty()) {
    argv.push_back("-i");
    argv.push_back(settings.identityFile);
  }
  argv.push_back("--");
  argv.push_back(host);
  argv.push_back(remoteBootstrapCommand(nonce));
  return argv;
}

std::string remoteScript(const RemoteScriptInput& in) {
  std::string s;
  for (const auto& e : in.env) {
    auto eq = e.find('=');
    if (eq == std::string::npos || !validEnvName(e.substr(0, eq))) continue;
    s += "export " + e.substr(0, eq) + "=" + shellQuote(e.substr(eq + 1)) + "\n";
  }
  s += "cd -- " + shellQuote(in.workingDirectory) + " || { printf '%s\\n' " +
       shellQuote("ringfoldrun: host " + in.host + " has no directory " + in.workingDirectory +
                  " (ranks start in the launcher's working directory)") +
       " >&2; exit 1; }\n";
  std::string command;
  for (const auto& a : in.command) command += " " + shellQuote(a);
  // The rank's group, or just its pid when setsid was missing.
  // Every signal but KILL is followed by CONT: a stopped rank would not act on it before.
  s += "sig() { kill -s \"$1\" -- \"-$p\" 2>/dev/null || kill -s \"$1\" \"$p\" 2>/dev/null; "
       "[ \"$1\" = KILL ] || kill -s CONT -- \"-$p\" 2>/dev/null || kill -s CONT \"$p\" 2>/dev/null; }\n";
  s += "exec 3<&0 </dev/null\n";
  s += "printf '%s\\n' " + shellQuote(startedMarker(in.nonce)) + "\n";
  s += "if command -v setsid >/dev/null 2>&1; then setsid" + command + " 3<&- & else" + command +
       " 3<&- & fi\n";
  s += "p=$!\n";
  s += "( while IFS= read -r s <&3; do case $s in TERM|INT|HUP|KILL) sig \"$s\";; esac; done\n"
       "  sig TERM; i=0\n"
       "  while [ $i -lt " + formatTenths(in.gracePeriodSeconds) +
       " ] && kill -0 \"$p\" 2>/dev/null; do sleep 0.1; i=$((i+1)); done\n"
       "  sig KILL ) >/dev/null 2>&1 &\n";
  s += "w=$!\n";
  s += "exec 3<&-\n";
  s += "{ wait \"$p\"; st=$?; } 2>/dev/null\n";  // no "Terminated" from the shell
  s += "sig KILL; kill \"$w\" 2>/dev/null\n";
  s += "exit \"$st\"\n";
  s += endMarker(in.nonce) + "\n";
  return s;
}

RankProcess startRemoteRank(int rank, const std::string& sshProgram,
                            const std::vector<std::string>& argv,
                            const std::vector<std::string>& launcherEnv, const std::string& script) {
  RankProcess p = spawnRank(rank, sshProgram, argv, launcherEnv, /*stdinPipe=*/true);
  // The whole script must fit in the pipe: ssh may not read it before it has connected.
  if (script.size() > 65536) fcntl(p.stdinFd, F_SETPIPE_SZ, static_cast<int>(script.size()));
  ssize_t n = write(p.stdinFd, script.data(), script.size());
  if (n != static_cast<ssize_t>(script.size())) {
    int e = errno;
    signalGroup(p.pid, SIGKILL);
    while (waitpid(p.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    for (int fd : {p.stdinFd, p.stdoutFd, p.stderrFd}) close(fd);
    p.stdinFd = -1;
    throw SpawnError("cannot hand rank " + std::to_string(rank) + "'s environment (" +
                     std::to_string(script.size()) + " bytes) to ssh: " +
                     (n < 0 ? std::strerror(e) : "short write"));
  }
  return p;
}

bool signalRemoteRank(int stdinFd, int sig) {
  const char* line = sig == SIGKILL ? "KILL\n" : sig == SIGINT ? "INT\n" : sig == SIGHUP ? "HUP\n" : "TERM\n";
  if (stdinFd < 0) return false;
  return write(stdinFd, line, std::strlen(line)) == static_cast<ssize_t>(std::strlen(line));
}

}  // namespace ringfold::launcher
