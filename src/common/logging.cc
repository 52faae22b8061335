#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "common/params.h"

namespace ringfold {
namespace {

std::atomic<int> gRank{-1};
std::atomic<int> gLevel{-1};

LogLevel parseLevel(const std::string& s) {
  std::string v;
  for (char c : s) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "trace") return LogLevel::kTrace;
  if (v == "debug") return LogLevel::kDebug;
  if (v == "info") return LogLevel::kInfo;
  if (v == "warning" || v == "warn") return LogLevel::kWarning;
  if (v == "error") return LogLevel::kError;
  if (v == "fatal") return LogLevel::kFatal;
  std::fprintf(stderr, "[ringfold] unknown log level '%s' in %s; using warning\n", s.c_str(),
               params::kLogLevel.name);
  return LogLevel::kWarning;
}

}  // namespace

void setLogRank(int rank) { gRank.store(rank); }

void reloadLogLevel() { gLevel.store(static_cast<int>(parseLevel(params::kLogLevel.str()))); }

LogLevel logLevel() {
  if (gLevel.load() < 0) reloadLogLevel();
  return static_cast<LogLevel>(gLevel.load());
}

bool logEnabled(LogLevel level) { return level >= logLevel(); }

namespace detail {

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  static const char kLetters[] = "TDIWEF";
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  const char* base = std::strrchr(file, '/');
  out_ << "[ringfold ";
  int rank = gRank.load();
  if (rank >= 0) out_ << rank << ' ';
  out_ << kLetters[static_cast<int>(level)] << ' ' << stamp << ' ' << (base ? base + 1 : file) << ':'
       << line << "] ";
}

LogLine::~LogLine() {
  out_ << '\n';
  std::string s = out_.str();
  std::fwrite(s.data(), 1, s.size(), stderr);
  (void)level_;
}

}  // namespace detail
}  // namespace ringfold
