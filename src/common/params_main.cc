// ringfold_params: prints the environment-variable table that docs/environment.md embeds.
#include <cstdio>
#include <cstring>

#include "common/params.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--markdown") == 0) {
    std::fputs(ringfold::params::markdownTable().c_str(), stdout);
    return 0;
  }
  for (const auto* p : ringfold::params::all()) std::printf("%s=%s\n", p->name, p->str().c_str());
  return 0;
}
