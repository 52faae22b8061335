#include "launcher/launch_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

namespace ringfold::launcher {

namespace {

[[noreturn]] void usageError(const std::string& what) { throw UsageError(what); }

// Parses a whole-string integer; `what` names the argument in the error.
int parsePositiveInt(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v > 1000000 || v < -1000000) {
    usageError(what + " expects a positive integer, got '" + text + "'");
  }
  if (v <= 0) usageError(what + " must be at least 1, got " + text);
  return static_cast<int>(v);
}

double parseSeconds(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !std::isfinite(v) || v < 0) {
    usageError(what + " expects a number of seconds (0 or more), got '" + text + "'");
  }
  return v;
}

bool validEnvName(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

EnvExport parseExport(const std::string& text) {
  EnvExport e;
  auto eq = text.find('=');
  e.name = text.substr(0, eq);
  if (eq != std::string::npos) e.value = text.substr(eq + 1);
  if (!validEnvName(e.name)) {
    usageError("-x expects VAR or VAR=value with VAR a variable name, got '" + text + "'");
  }
  return e;
}

// Options that take a value, by every spelling; the canonical name is the first listed.
struct OptionSpec {
  std::vector<std::string> spellings;
  bool takesValue;
};

const std::vector<OptionSpec>& optionSpecs() {
  static const std::vector<OptionSpec> specs = {
      {{"-np", "--num-proc", "-n"}, true},
      {{"-H", "--hosts"}, true},
      {{"--start-timeout"}, true},
      {{"--grace-period"}, true},
      {{"-x"}, true},
      {{"--verbose"}, false},
      {{"-h", "--help"}, false},
      {{"-v", "--version"}, false},
  };
  return specs;
}

}  // namespace

std::vector<HostSlots> parseHosts(const std::string& text) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string entry = text.substr(start, comma - start);
    start = comma + 1;
    if (entry.empty()) usageError("-H '" + text + "' has an empty host entry");
    HostSlots h;
    auto colon = entry.rfind(':');
    if (colon == std::string::npos) {
      h.host = entry;
    } else {
      h.host = entry.substr(0, colon);
      h.slots = parsePositiveInt(entry.substr(colon + 1), "-H entry '" + entry + "': slots");
    }
    if (h.host.empty()) usageError("-H entry '" + entry + "' has no host name");
    if (!seen.insert(h.host).second) {
      usageError("-H lists host '" + h.host + "' more than once; give it once with all its slots");
    }
    hosts.push_back(h);
    if (comma == text.size()) break;
  }
  return hosts;
}

namespace {

// Finds -h/--help and -v/--version among the options (as horovodrun, they win over any other,
// even a bad one); values of other options and the command are skipped.
void findHelpOrVersion(const std::vector<std::string>& args, LaunchOptions& opt) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') return;
    if (arg == "-h" || arg == "--help") opt.help = true;
    if (arg == "-v" || arg == "--version") opt.version = true;
    if (arg.find('=') != std::string::npos) continue;
    for (const auto& s : optionSpecs()) {
      for (const auto& sp : s.spellings) {
        if (sp == arg && s.takesValue) ++i;
      }
    }
  }
}

}  // namespace

LaunchOptions parseLaunchOptions(const std::vector<std::string>& args) {
  LaunchOptions opt;
  findHelpOrVersion(args, opt);
  if (opt.help || opt.version) return opt;
  std::optional<std::string> numProcText;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // first non-option: the command starts here

    // Split "--name=value" / "-np=4".
    std::string name = arg;
    std::optional<std::string> inlineValue;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      inlineValue = arg.substr(eq + 1);
    }
    const OptionSpec* spec = nullptr;
    for (const auto& s : optionSpecs()) {
      for (const auto& sp : s.spellings) {
        if (sp == name) spec = &s;
      }
    }
    if (spec == nullptr) {
      usageError("unknown option '" + arg + "' (the command to run goes after the options)");
    }
    const std::string& canonical = spec->spellings[0];
    std::string value;
    if (spec->takesValue) {
      if (inlineValue) {
        value = *inlineValue;
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        usageError("option '" + name + "' expects a value");
      }
    } else if (inlineValue) {
      usageError("option '" + name + "' takes no value, got '" + arg + "'");
    }

    if (canonical == "-np") {
      numProcText = value;
      opt.numProc = parsePositiveInt(value, "-np");
    } else if (canonical == "-H") {
      opt.hosts = parseHosts(value);
      opt.hostsGiven = true;
    } else if (canonical == "--start-timeout") {
      opt.startTimeoutSeconds = parseSeconds(value, "--start-timeout");
    } else if (canonical == "--grace-period") {
      opt.gracePeriodSeconds = parseSeconds(value, "--grace-period");
    } else if (canonical == "-x") {
      opt.exports.push_back(parseExport(value));
    } else if (canonical == "--verbose") {
      opt.verbose = true;
    } else if (canonical == "-h") {
      opt.help = true;
    } else if (canonical == "-v") {
      opt.version = true;
    }
  }
  opt.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  if (opt.help || opt.version) return opt;
  if (!numProcText) usageError("missing -np: say how many ranks to start, e.g. -np 4");
  if (opt.hostsGiven) {
    long long slots = 0;
    for (const auto& h : opt.hosts) slots += h.slots;
    if (opt.numProc > slots) {
      usageError("-np " + std::to_string(opt.numProc) + " is more than the " + std::to_string(slots) +
                 " slot(s) given by -H");
    }
  } else {
    opt.hosts = {HostSlots{"localhost", opt.numProc}};
  }
  if (opt.command.empty()) usageError("no command given: put the program to run after the options");
  return opt;
}

LaunchOptions parseLaunchOptions(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parseLaunchOptions(args);
}

std::string usageText() {
  return R"(usage: ringfoldrun -np N [options] command [args...]

Starts N ranks of `command`, hosts their rendezvous store, and forwards their output
prefixed with the rank ("[3]<stdout>:..."). If a rank fails, the others are stopped.

options:
  -np, --num-proc N     number of ranks to start (required)
  -H, --hosts LIST      hosts and slots, e.g. localhost:4 (default: localhost:N);
                        only this machine for now (localhost, 127.0.0.1 or its hostname)
  --start-timeout S     seconds ranks wait for the store and their peers at start-up
                        (passed to the ranks as RINGFOLD_START_TIMEOUT)
  --grace-period S      seconds between SIGTERM and SIGKILL when stopping ranks (default 3)
  -x VAR[=value]        export VAR to the ranks (with a value: set it), may repeat
  --verbose             print what the launcher does
  -h, --help            show this help and exit
  -v, --version         show the version and exit

Options end at the first non-option argument (or "--"); everything after it is the command.

Each rank gets the launcher's environment plus RINGFOLD_RANK, RINGFOLD_SIZE,
RINGFOLD_LOCAL_RANK, RINGFOLD_LOCAL_SIZE, RINGFOLD_CROSS_RANK, RINGFOLD_CROSS_SIZE,
RINGFOLD_STORE_ADDR, RINGFOLD_STORE_PORT, RINGFOLD_SECRET, the HOROVOD_* equivalents,
HOROVOD_HOSTNAME and PYTHONUNBUFFERED=1.

exit status: 0 when every rank exits 0; the first failing rank's status (128+signal if it
was killed); 130/143 after SIGINT/SIGTERM to the launcher; 2 for bad arguments; 127 when
the command cannot be run.
)";
}

}  // namespace ringfold::launcher
