#include "launcher/launch_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include <sys/stat.h>
#include <unistd.h>

namespace ringfold::launcher {

namespace {

[[noreturn]] void usageError(const std::string& what) { throw UsageError(what); }

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
      {{"--failure-grace"}, true},
      {{"-x"}, true},
      {{"--hostfile", "-hostfile"}, true},
      {{"--ssh-port", "-p"}, true},
      {{"--ssh-identity-file", "-i"}, true},
      {{"--ssh-option"}, true},
      {{"--network-interface", "--network-interfaces"}, true},
      {{"--output-filename"}, true},
      {{"--bind-to"}, true},
      {{"--host-discovery-script"}, true},
      {{"--min-np", "--min-num-proc"}, true},
      {{"--max-np", "--max-num-proc"}, true},
      {{"--slots", "--slots-per-host"}, true},
      {{"--elastic-timeout"}, true},
      {{"--reset-limit"}, true},
      {{"--verbose"}, false},
      {{"-cb", "--check-build"}, false},
      {{"-h", "--help"}, false},
      {{"-v", "--version"}, false},
  };
  return specs;
}

// A discovery script given as a path must be an executable file (a bare name is looked up on
// PATH when the job starts). Only the first word counts: the value is a /bin/sh command.
void checkDiscoveryScript(const std::string& value) {
  const std::string word = value.substr(0, value.find_first_of(" \t"));
  if (word.empty()) usageError("--host-discovery-script expects a script, got '" + value + "'");
  if (word.find('/') == std::string::npos) return;
  struct stat st {};
  if (stat(word.c_str(), &st) != 0) usageError("--host-discovery-script: no such file '" + word + "'");
  if (!S_ISREG(st.st_mode) || access(word.c_str(), X_OK) != 0) {
    usageError("--host-discovery-script: '" + word + "' is not an executable file (chmod +x it)");
  }
}

// Elastic defaults and checks (the contract's elastic bullet), after every option was read.
void finishElastic(LaunchOptions& opt, bool numProcGiven, const std::string& elasticFlag,
                   const std::string& hostsFrom) {
  if (!opt.elastic()) {
    if (!elasticFlag.empty()) {
      usageError(elasticFlag + " is for elastic jobs: give --host-discovery-script too");
    }
    return;
  }
  if (!hostsFrom.empty()) {
    usageError(hostsFrom + " and --host-discovery-script both give the hosts; use one");
  }
  if (opt.failureGraceSeconds) {
    usageError("--failure-grace is not for elastic jobs: a failed worker makes the others reset, "
               "it does not stop them");
  }
  if (!numProcGiven && opt.minNumProc == 0) {
    usageError("missing -np or --min-np: say how many workers an elastic job needs, e.g. --min-np 2");
  }
  if (opt.minNumProc == 0) opt.minNumProc = opt.numProc;
  if (!numProcGiven) opt.numProc = opt.minNumProc;
  if (opt.maxNumProc && opt.minNumProc > *opt.maxNumProc) {
    usageError("--min-np " + std::to_string(opt.minNumProc) + " is more than --max-np " +
               std::to_string(*opt.maxNumProc));
  }
  if (opt.numProc < opt.minNumProc) {
    usageError("-np " + std::to_string(opt.numProc) + " is less than --min-np " +
               std::to_string(opt.minNumProc));
  }
  if (opt.maxNumProc && opt.numProc > *opt.maxNumProc) {
    usageError("-np " + std::to_string(opt.numProc) + " is more than --max-np " +
               std::to_string(*opt.maxNumProc));
  }
}

}  // namespace

namespace {

// Finds -h/--help and -v/--version among the options (as horovodrun, they win over any other,
// even a bad one); values of other options and the command are skipped.
void findHelpOrVersion(const std::vector<std::string>& args, LaunchOptions& opt) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') return;
    if (arg == "-h" || arg == "--help") opt.help = true;
    if (arg == "-v" || arg == "--version") opt.version = true;
    if (arg == "-cb" || arg == "--check-build") opt.checkBuild = true;
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
  if (opt.help || opt.version || opt.checkBuild) return opt;
  std::optional<std::string> numProcText;
  std::string hostsFrom;  // "-H" or "--hostfile", once one was seen
  std::string elasticFlag;  // the first elastic-only flag seen (for "needs --host-discovery-script")
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

    const bool elasticOnly = canonical == "--min-np" || canonical == "--max-np" || canonical == "--slots" ||
                             canonical == "--elastic-timeout" || canonical == "--reset-limit";
    if (elasticOnly && elasticFlag.empty()) elasticFlag = canonical;
    if (canonical == "-np") {
      numProcText = value;
      opt.numProc = parsePositiveInt(value, "-np");
    } else if (canonical == "-H") {
      if (hostsFrom == "--hostfile") usageError("-H and --hostfile both give the hosts; use one");
      if (hostsFrom == "-H") usageError("-H is given twice; list every host in one -H");
      opt.hosts = parseHosts(value);
      opt.hostsGiven = true;
      hostsFrom = "-H";
    } else if (canonical == "--hostfile") {
      if (hostsFrom == "-H") usageError("-H and --hostfile both give the hosts; use one");
      if (hostsFrom == "--hostfile") usageError("--hostfile is given twice; give one file");
      opt.hostfile = value;
      opt.hosts = readHostfile(value);
      opt.hostsGiven = true;
      hostsFrom = "--hostfile";
    } else if (canonical == "--ssh-port") {
      opt.sshPort = parsePositiveInt(value, "--ssh-port");
      if (opt.sshPort > 65535) usageError("--ssh-port must be a TCP port (1-65535), got " + value);
    } else if (canonical == "--ssh-identity-file") {
      if (value.empty()) usageError("--ssh-identity-file expects a file name");
      opt.sshIdentityFile = value;
    } else if (canonical == "--ssh-option") {
      if (value.empty() || value[0] == '-') {
        usageError("--ssh-option expects an ssh option such as UserKnownHostsFile=/path, got '" +
                   value + "'");
      }
      opt.sshOptions.push_back(value);
    } else if (canonical == "--network-interface") {
      if (value.empty() || value.find_first_of(" =^") != std::string::npos ||
          value.front() == ',' || value.back() == ',' || value.find(",,") != std::string::npos) {
        usageError("--network-interface expects interface names such as eth0 or eth0,ib0, got '" +
                   value + "'");
      }
      opt.networkInterfaces = value;
    } else if (canonical == "--output-filename") {
      if (value.empty()) usageError("--output-filename expects a directory");
      opt.outputDir = value;
    } else if (canonical == "--bind-to") {
      if (value == "auto") {
        opt.bindTo = BindPolicy::kAuto;
      } else if (value == "core") {
        opt.bindTo = BindPolicy::kCore;
      } else if (value == "none") {
        opt.bindTo = BindPolicy::kNone;
      } else {
        usageError("--bind-to expects auto, core or none, got '" + value + "'");
      }
    } else if (canonical == "--host-discovery-script") {
      checkDiscoveryScript(value);
      opt.discoveryScript = value;
    } else if (canonical == "--min-np") {
      opt.minNumProc = parsePositiveInt(value, "--min-np");
    } else if (canonical == "--max-np") {
      opt.maxNumProc = parsePositiveInt(value, "--max-np");
    } else if (canonical == "--slots") {
      opt.slotsPerHost = parsePositiveInt(value, "--slots");
    } else if (canonical == "--elastic-timeout") {
      opt.elasticTimeoutSeconds = parseSeconds(value, "--elastic-timeout");
    } else if (canonical == "--reset-limit") {
      if (!value.empty() && value[0] == '-') {
        usageError("--reset-limit must be 0 or more, got " + value);
      }
      opt.resetLimit = value == "0" ? 0 : parsePositiveInt(value, "--reset-limit");
    } else if (canonical == "--start-timeout") {
      opt.startTimeoutSeconds = parseSeconds(value, "--start-timeout");
    } else if (canonical == "--grace-period") {
      opt.gracePeriodSeconds = parseSeconds(value, "--grace-period");
    } else if (canonical == "--failure-grace") {
      opt.failureGraceSeconds = parseSeconds(value, "--failure-grace");
    } else if (canonical == "-x") {
      opt.exports.push_back(parseExport(value));
    } else if (canonical == "--verbose") {
      opt.verbose = true;
    } else if (canonical == "-h") {
      opt.help = true;
    } else if (canonical == "-v") {
      opt.version = true;
    } else if (canonical == "-cb") {
      opt.checkBuild = true;
    }
  }
  opt.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  if (opt.help || opt.version || opt.checkBuild) return opt;
  finishElastic(opt, numProcText.has_value(), elasticFlag, hostsFrom);
  if (!numProcText && !opt.elastic()) usageError("missing -np: say how many ranks to start, e.g. -np 4");
  if (opt.elastic()) {
    // hosts come from discovery
  } else if (opt.hostsGiven) {
    long long slots = 0;
    for (const auto& h : opt.hosts) slots += h.slots;
    if (opt.numProc > slots) {
      usageError("-np " + std::to_string(opt.numProc) + " is more than the " + std::to_string(slots) +
                 " slot(s) given by " + hostsFrom);
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
       ringfoldrun --min-np M --host-discovery-script S [elastic options] command [args...]
       ringfoldrun --check-build

Starts N ranks of `command` on this machine and, over ssh, on other hosts; hosts their
rendezvous store; forwards their output prefixed with the rank ("[3]<stdout>:..."). If a
rank fails, or a host cannot be reached, every rank on every host is stopped (after a rank's
failure, once the others have had --failure-grace to fail on their own).

hosts:
  -np, --num-proc N     number of ranks to start (required)
  -H, --hosts LIST      hosts and slots, e.g. node1:4,node2:4 (default: localhost:N); ranks
                        fill the hosts in order. localhost, 127.x.x.x, this machine's
                        hostname and the addresses of its interfaces run here, without ssh
  --hostfile FILE       hosts from FILE, one per line: "node1 slots=4" ('#' comments)
  -p, --ssh-port P      ssh port of the remote hosts
  -i, --ssh-identity-file F
                        private key for ssh
  --ssh-option OPT      extra ssh option, passed as "-o OPT" (may repeat), e.g.
                        UserKnownHostsFile=/path or StrictHostKeyChecking=yes
  --network-interface IFACES
                        interface(s) the job uses, e.g. eth0 or eth0,ib0: the store listens
                        on the first one's address and the ranks get RINGFOLD_SOCKET_IFNAME
                        (default: the interface of the route to the first remote host)
run:
  --start-timeout S     seconds for every host to start its ranks and for ranks to wait for
                        the store and their peers (passed on as RINGFOLD_START_TIMEOUT;
                        default: RINGFOLD_START_TIMEOUT or 60)
  --grace-period S      seconds between SIGTERM and SIGKILL when stopping ranks (default 3)
  --failure-grace S     after a rank fails, seconds the others have to fail and exit on their
                        own (naming the failed peer) before they are stopped (default:
                        RINGFOLD_FAILURE_GRACE or 2; 0: stop them at once)
  -x VAR[=value]        export VAR to the ranks (with a value: set it), may repeat
  --output-filename DIR also write each rank's output to DIR/rank.N/stdout and stderr
  --bind-to auto|core|none
                        core: each rank on this machine runs on its own share of the cores
                        the launcher may use (1 of 4 ranks on 16 cores: 4 cores; more ranks
                        than cores: one core each, round robin); auto (default): as core
                        when the ranks outnumber the cores, or fill them and talk through
                        shared memory (the default on one host), else unbound; none: unbound
  --verbose             print what the launcher does, and how long start-up took
  -cb, --check-build    show which transports, reducers and bindings this build has
  -h, --help            show this help and exit
  -v, --version         show the version and exit
elastic (docs/launching.md, "Elastic jobs"; docs/elastic.md):
  --host-discovery-script S
                        elastic mode: /bin/sh runs S about every second; each line it prints
                        is "host" or "host:slots", the hosts the job may use now
  --min-np, --min-num-proc M
                        fewest workers to go on with (default: -np)
  --max-np, --max-num-proc X
                        most workers (default: unlimited)
  --slots, --slots-per-host K
                        slots of a discovered host without ":slots" (default 1)
  --elastic-timeout S   seconds to wait for --min-np workers before failing (default 600)
  --reset-limit R       most membership changes before the job fails (default: unlimited)

Options end at the first non-option argument (or "--"); everything after it is the command.

Each rank gets RINGFOLD_RANK, RINGFOLD_SIZE, RINGFOLD_LOCAL_RANK, RINGFOLD_LOCAL_SIZE,
RINGFOLD_CROSS_RANK, RINGFOLD_CROSS_SIZE, RINGFOLD_STORE_ADDR, RINGFOLD_STORE_PORT,
RINGFOLD_SECRET, the HOROVOD_* equivalents, HOROVOD_HOSTNAME and PYTHONUNBUFFERED=1. Local
ranks inherit the launcher's environment; remote ranks start in the same directory with
their login environment plus the launcher's RINGFOLD_* and HOROVOD_* variables and the -x
ones (use -x PATH to pass PATH on). The job secret travels over ssh's stdin, never on a
command line.

exit status: 0 when every rank exits 0; the first failing rank's status (128+signal if it
was killed; 255 when ssh failed); 130/143 after SIGINT/SIGTERM to the launcher; 2 for bad
arguments; 127 when the command cannot be run; 1 when a host did not start in time.
Elastic jobs: 0 when every worker of the last incarnation exits 0; 1 when discovery fails
at start, too few workers remain after --elastic-timeout, or --reset-limit is exceeded.
)";
}

}  // namespace ringfold::launcher
