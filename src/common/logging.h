// Logging to stderr, one line per message, prefixed with the rank:
//
//   [ringfold 3 W 08:55:07.123 tcp_store.cc:88] message
//
// The threshold comes from RINGFOLD_LOG_LEVEL (alias HOROVOD_LOG_LEVEL): trace, debug, info,
// warning (default), error, fatal. setLogRank() is called once the rank is known.
#pragma once

#include <sstream>

namespace ringfold {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarning, kError, kFatal };

void setLogRank(int rank);
bool logEnabled(LogLevel level);
LogLevel logLevel();
// Re-reads RINGFOLD_LOG_LEVEL (tests change it at run time).
void reloadLogLevel();

namespace detail {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  std::ostream& stream() { return out_; }

 private:
  LogLevel level_;
  std::ostringstream out_;
};
}  // namespace detail
}  // namespace ringfold

#define RF_LOG(level)                                                  \
  if (!::ringfold::logEnabled(::ringfold::LogLevel::level)) {          \
  } else                                                               \
    ::ringfold::detail::LogLine(::ringfold::LogLevel::level, __FILE__, __LINE__).stream()
