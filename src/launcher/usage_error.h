// UsageError: bad command-line input to ringfoldrun (an option, a host list, a hostfile line).
// what() is a complete sentence naming the bad argument (or FILE:LINE); ringfoldrun prints it
// with a pointer to --help and exits with kUsageExitCode.
#pragma once

#include <string>

#include "common/error.h"

namespace ringfold::launcher {

inline constexpr int kUsageExitCode = 2;

class UsageError : public InvalidArgument {
 public:
  explicit UsageError(const std::string& what) : InvalidArgument(what) {}
};

}  // namespace ringfold::launcher
