// RemoteRank: how a rank on another host is started, stopped and tied to the launcher's life.
//
// The launcher runs, for each remote rank, a local ssh client (a child like any local rank):
//
//   ssh [-o OPT]... -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o ConnectTimeout=T
//       -o ServerAliveInterval=A -o ServerAliveCountMax=3 -o LogLevel=ERROR -T [-p PORT]
//       [-i KEY] -- HOST 'exec /bin/sh -c '\''<bootstrap>'\'''
//
// The bootstrap (remoteBootstrapCommand) is all that appears on any command line, here or in
// `ps` on the remote host: it reads lines from stdin up to "#rf-end-<nonce>" and evals them.
// The launcher writes that script (remoteScript) into the ssh client's stdin: `export` lines
// for the rank's variables (the job secret among them: shell builtins, so never an argv),
// `cd` to the launcher's working directory, then
//   * fd 3 := the ssh channel's stdin, stdin := /dev/null; print "#rf-started-<nonce>" (the
//     launcher swallows that line and counts the rank as started);
//   * start the command with setsid, in its own session and process group (pid $p);
//   * a watcher reads fd 3: a line TERM/INT/HUP/KILL signals the rank's group (followed by
//     CONT, except after KILL, so that a stopped rank acts on it at once); end of file --
//     the launcher closed the pipe, exited, or was SIGKILLed (its ssh clients then die of
//     PR_SET_PDEATHSIG, and sshd closes the channel) -- sends SIGTERM, then SIGKILL after
//     the grace period;
//   * wait for the rank, SIGKILL what is left of its group, exit with the rank's status (ssh
//     passes it on: 128+N for a rank killed by signal N; 255 is ssh's own failure).
// Trust: the secret is in the environment of the rank's processes (readable, as any
// environment, by the same user and root only) and crosses the network inside ssh.
//
// Contract for sshd: any POSIX /bin/sh; a login shell of the sh, bash, zsh, csh or fish family
// (the bootstrap has no newline, '!' or single quote inside its quotes); util-linux `setsid`
// (without it the rank is signalled by pid only). A host that lacks the working directory
// fails the rank with a message naming the host and directory.
#pragma once

#include <string>
#include <vector>

#include "launcher/rank_process.h"

namespace ringfold::launcher {

struct SshSettings {
  int port = 0;                         // 0: ssh's default
  std::string identityFile;             // empty: ssh's default keys
  std::vector<std::string> options;     // user's "-o" options; given first, so they win
  double startTimeoutSeconds = 60;      // ConnectTimeout; ServerAliveInterval = this / 3 (1-10 s)
};

struct RemoteScriptInput {
  std::vector<std::string> env;      // "NAME=value" to export on the remote host
  std::string workingDirectory;
  std::vector<std::string> command;  // program and arguments
  std::string host;                  // for error messages
  double gracePeriodSeconds = 3;
  std::string nonce;                 // [0-9a-f]+, fresh per job
};

// A fresh random nonce (hex).
std::string newNonce();
std::string startedMarker(const std::string& nonce);
std::string endMarker(const std::string& nonce);

// Single-quotes `s` for POSIX sh ('it'\''s').
std::string shellQuote(const std::string& s);

// The command line ssh runs on the remote host (no secrets in it).
std::string remoteBootstrapCommand(const std::string& nonce);

// ssh's argv (argv[0] = `ssh`) for one remote rank on `host`.
std::vector<std::string> sshArgv(const std::string& ssh, const SshSettings& settings,
                                 const std::string& host, const std::string& nonce);

// The script written into the ssh client's stdin, ending with endMarker(nonce).
std::string remoteScript(const RemoteScriptInput& in);

// Starts the ssh client (spawnRank with a stdin pipe) and writes `script` into its stdin;
// the returned stdinFd stays open: closing it tells the remote side to stop the rank.
RankProcess startRemoteRank(int rank, const std::string& sshProgram,
                            const std::vector<std::string>& argv,
                            const std::vector<std::string>& launcherEnv, const std::string& script);

// Asks the remote side to send `sig` (SIGTERM, SIGINT, SIGHUP or SIGKILL) to the rank's
// process group. Returns false if the ssh client no longer reads its stdin.
bool signalRemoteRank(int stdinFd, int sig);

}  // namespace ringfold::launcher
