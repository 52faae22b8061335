// ringfoldrun: starts the ranks of a ringfold job on this machine and, over ssh, on others. See
// launch_options.h for the command line and job.h for what happens to the ranks and which exit
// code comes back; with --host-discovery-script, elastic_job.h.
#include <cstdio>
#include <exception>

#include "launcher/check_build.h"
#include "launcher/elastic_job.h"
#include "launcher/job.h"
#include "launcher/launch_options.h"

#ifndef RINGFOLD_VERSION
#define RINGFOLD_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  using namespace ringfold::launcher;
  try {
    LaunchOptions options = parseLaunchOptions(argc, argv);
    if (options.help) {
      std::fputs(usageText().c_str(), stdout);
      return 0;
    }
    if (options.version) {
      std::printf("ringfoldrun (ringfold) %s\n", RINGFOLD_VERSION);
      return 0;
    }
    if (options.checkBuild) {
      std::fputs(checkBuildReport(RINGFOLD_VERSION).c_str(), stdout);
      return 0;
    }
    std::fflush(stdout);  // nothing buffered may be written twice by a forked child
    if (options.elastic()) return ElasticJob(std::move(options)).run();
    return Job(std::move(options)).run();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ringfoldrun: error: %s\nTry 'ringfoldrun --help' for more information.\n",
                 e.what());
    return kUsageExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringfoldrun: error: %s\n", e.what());
    return 1;
  }
}
