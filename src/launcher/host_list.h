// HostList: which hosts a job runs on and how many ranks each may take, from -H or --hostfile.
//
//   -H host1:2,host2:4,host3        no ":slots" means 1 slot
//   --hostfile FILE                 one host per line, horovodrun/Open MPI style:
//       # comment                       '#' starts a comment (whole line or after the entry)
//       node1 slots=4                   host, then optionally slots=N (default 1)
//       10.0.0.7:2                      the -H form is accepted too
//                                       blank lines are skipped
//
// Contract: hosts keep their order (ranks are placed in that order); a host listed twice, a
// missing or non-positive slot count, or anything else on a line is a UsageError naming the
// entry, or FILE:LINE for a hostfile. A hostfile that cannot be read, or that lists no host,
// is a UsageError naming the file. A host name may not start with '-' (it would reach ssh as
// an option).
#pragma once

#include <string>
#include <vector>

namespace ringfold::launcher {

// One host and how many ranks may run there.
struct HostSlots {
  std::string host;
  int slots = 1;
};

// Parses a -H value: "host1:2,host2:4,host3". Throws UsageError.
std::vector<HostSlots> parseHosts(const std::string& text);

// Parses hostfile contents; `fileName` only names the file in errors. Throws UsageError.
std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& fileName);

// Reads and parses the hostfile at `path`. Throws UsageError.
std::vector<HostSlots> readHostfile(const std::string& path);

// Parses a whole-string integer in 1..1000000; `what` names the argument in the error.
int parsePositiveInt(const std::string& text, const std::string& what);

}  // namespace ringfold::launcher
