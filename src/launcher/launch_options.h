// LaunchOptions: ringfoldrun's command line, parsed without side effects other than reading a
// --hostfile (no spawning, no environment reads), so every case is unit-tested.
//
//   ringfoldrun -np N [-H host:slots,... | --hostfile FILE] [--ssh-port P]
//               [--ssh-identity-file F] [--ssh-option OPT]... [--network-interface IFACES]
//               [--start-timeout S] [--grace-period S] [--output-filename DIR]
//               [--bind-to auto|core|none] [--verbose]
//               [-x VAR[=value]]... command [args...]
//   ringfoldrun --check-build | --help | --version
//
// Contract
//   * Options end at the first argument that is not an option (or after "--"); that argument and
//     everything after it is the command, passed on untouched (its own "-x" or "--lr" included).
//   * Long options accept "--name value" and "--name=value"; "-np" and "-H" also "-np=4".
//   * -h/--help, -v/--version and -cb/--check-build win over everything else (as horovodrun)
//     and need no command.
//   * Bad input throws UsageError whose message names the offending argument: a missing, zero,
//     negative or non-numeric -np; -np above the slots -H/--hostfile give; -H together with
//     --hostfile; an unknown option; an option missing its value; a malformed host entry or one
//     listed twice (hostfile errors name FILE:LINE, see host_list.h); a bad --ssh-port or
//     --bind-to; no command. ringfoldrun prints it and exits with kUsageExitCode.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/cpu_binding.h"
#include "launcher/host_list.h"
#include "launcher/usage_error.h"

namespace ringfold::launcher {

// One -x entry: VAR=value sets VAR for the ranks; a bare VAR passes the launcher's value on.
struct EnvExport {
  std::string name;
  std::optional<std::string> value;
};

struct LaunchOptions {
  int numProc = 0;
  std::vector<HostSlots> hosts;  // from -H or --hostfile; defaults to {"localhost", numProc}
  bool hostsGiven = false;       // -H or --hostfile was on the command line
  std::string hostfile;          // --hostfile path, empty if not given
  std::optional<double> startTimeoutSeconds;
  double gracePeriodSeconds = 3.0;  // SIGTERM -> SIGKILL delay when stopping ranks
  bool verbose = false;
  std::vector<EnvExport> exports;
  // ssh to remote hosts
  int sshPort = 0;                      // 0: ssh's default (22, or ~/.ssh/config)
  std::string sshIdentityFile;          // -i for ssh; empty: ssh's default keys
  std::vector<std::string> sshOptions;  // each passed as "-o OPT" before ringfoldrun's own
  // Comma-separated interface names: the store listens on the first one's address, and ranks
  // get RINGFOLD_SOCKET_IFNAME="=<list>". Empty: chosen from the route to the first remote host.
  std::string networkInterfaces;
  std::string outputDir;  // --output-filename: DIR/rank.N/{stdout,stderr} besides the terminal
  BindPolicy bindTo = BindPolicy::kAuto;  // --bind-to: CPUs of the local ranks (cpu_binding.h)
  bool checkBuild = false;
  bool help = false;
  bool version = false;
  std::vector<std::string> command;
};

// Parses argv[1..argc). Throws UsageError on bad input (see the contract above).
LaunchOptions parseLaunchOptions(int argc, const char* const* argv);
LaunchOptions parseLaunchOptions(const std::vector<std::string>& args);

// The --help text.
std::string usageText();

}  // namespace ringfold::launcher
