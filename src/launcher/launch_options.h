// LaunchOptions: ringfoldrun's command line, parsed without side effects other than reading a
// --hostfile (no spawning, no environment reads), so every case is unit-tested.
//
//   ringfoldrun -np N [-H host:slots,... | --hostfile FILE] [--ssh-port P]
//               [--ssh-identity-file F] [--ssh-option OPT]... [--network-interface IFACES]
//               [--start-timeout S] [--grace-period S] [--failure-grace S]
//               [--output-filename DIR]
//               [--bind-to auto|core|none] [--verbose]
//               [-x VAR[=value]]... command [args...]
//   ringfoldrun [-np N] --min-np M [--max-np X] --host-discovery-script S [--slots K]
//               [--elastic-timeout T] [--reset-limit R] [options] command [args...]   (elastic)
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
//   * Elastic mode (elastic_job.h) is on when --host-discovery-script is given. Horovod's names
//     and defaults: -np defaults to --min-np and --min-np to -np (one of them is required);
//     --max-np unlimited; --slots (also --slots-per-host) 1; --elastic-timeout from
//     RINGFOLD_ELASTIC_TIMEOUT / HOROVOD_ELASTIC_TIMEOUT when the job starts, else 600 s;
//     --reset-limit unlimited. UsageErrors: --min-np above --max-np, -np outside
//     [--min-np, --max-np], a negative --reset-limit, an elastic flag without
//     --host-discovery-script, -H/--hostfile or --failure-grace together with it, and a
//     discovery script given as a path that is missing or not executable (a bare name is looked
//     up on PATH when the job starts, elastic_job.h).
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
  // --failure-grace: after the first rank fails, how long the others may fail and exit on their
  // own before they are stopped (job.h); none: RINGFOLD_FAILURE_GRACE (2 s). Not elastic.
  std::optional<double> failureGraceSeconds;
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
  // Elastic mode (empty discoveryScript: off). hosts stay empty: discovery gives them.
  std::string discoveryScript;        // --host-discovery-script, run with /bin/sh -c
  int minNumProc = 0;                 // --min-np (set from -np when not given)
  std::optional<int> maxNumProc;      // --max-np; none: unlimited
  int slotsPerHost = 1;               // --slots: for discovery lines without ":slots"
  std::optional<double> elasticTimeoutSeconds;  // --elastic-timeout; none: RINGFOLD_ELASTIC_TIMEOUT (600)
  std::optional<int> resetLimit;      // --reset-limit; none: unlimited
  bool elastic() const { return !discoveryScript.empty(); }
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
