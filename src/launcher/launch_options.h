// LaunchOptions: ringfoldrun's command line, parsed without side effects (no spawning, no
// environment reads), so every case is unit-tested.
//
//   ringfoldrun -np N [-H host:slots,...] [--start-timeout S] [--grace-period S] [--verbose]
//               [-x VAR[=value]]... command [args...]
//
// Contract
//   * Options end at the first argument that is not an option (or after "--"); that argument and
//     everything after it is the command, passed on untouched (its own "-x" or "--lr" included).
//   * Long options accept "--name value" and "--name=value"; "-np" and "-H" also "-np=4".
//   * -h/--help and -v/--version win over everything else (as horovodrun) and need no command.
//   * Bad input throws UsageError whose message names the offending argument: a missing, zero,
//     negative or non-numeric -np; -np above the slots -H gives; an unknown option; an option
//     missing its value; a malformed host entry or one listed twice; no command.
//     ringfoldrun prints it and exits with kUsageExitCode.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace ringfold::launcher {

inline constexpr int kUsageExitCode = 2;

// Bad command-line input. what() is a complete sentence naming the bad argument.
class UsageError : public InvalidArgument {
 public:
  explicit UsageError(const std::string& what) : InvalidArgument(what) {}
};

// One -H entry: a host name and how many ranks may run there.
struct HostSlots {
  std::string host;
  int slots = 1;
};

// One -x entry: VAR=value sets VAR for the ranks; a bare VAR passes the launcher's value on.
struct EnvExport {
  std::string name;
  std::optional<std::string> value;
};

struct LaunchOptions {
  int numProc = 0;
  std::vector<HostSlots> hosts;  // from -H; defaults to {"localhost", numProc}
  bool hostsGiven = false;       // -H was on the command line
  std::optional<double> startTimeoutSeconds;
  double gracePeriodSeconds = 3.0;  // SIGTERM -> SIGKILL delay when stopping ranks
  bool verbose = false;
  std::vector<EnvExport> exports;
  bool help = false;
  bool version = false;
  std::vector<std::string> command;
};

// Parses argv[1..argc). Throws UsageError on bad input (see the contract above).
LaunchOptions parseLaunchOptions(int argc, const char* const* argv);
LaunchOptions parseLaunchOptions(const std::vector<std::string>& args);

// Parses a -H value: "host1:2,host2:4,host3" (no ":slots" means 1 slot). Throws UsageError.
std::vector<HostSlots> parseHosts(const std::string& text);

// The --help text.
std::string usageText();

}  // namespace ringfold::launcher
