#include "launcher/rank_environment.h"

#include <cstdio>

extern char** environ;

namespace ringfold::launcher {

namespace {

std::string nameOf(const std::string& entry) { return entry.substr(0, entry.find('=')); }

void setVar(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  std::string entry = name + "=" + value;
  for (auto& e : env) {
    if (nameOf(e) == name) {
      e = entry;
      return;
    }
  }
  env.push_back(std::move(entry));
}

std::string formatSeconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// Step 3 of the header's list: what the launcher decides, which always wins.
void setRunVariables(std::vector<std::string>& env, const LaunchOptions& options,
                     const RankSlot& slot, const StoreEndpoint& store) {
  setVar(env, "PYTHONUNBUFFERED", "1");
  const std::pair<const char*, int> ids[] = {
      {"RANK", slot.rank},           {"SIZE", slot.size},
      {"LOCAL_RANK", slot.localRank}, {"LOCAL_SIZE", slot.localSize},
      {"CROSS_RANK", slot.crossRank}, {"CROSS_SIZE", slot.crossSize},
  };
  for (const auto& [suffix, value] : ids) {
    setVar(env, std::string("RINGFOLD_") + suffix, std::to_string(value));
    setVar(env, std::string("HOROVOD_") + suffix, std::to_string(value));
  }
  setVar(env, "HOROVOD_HOSTNAME", slot.host);
  setVar(env, "RINGFOLD_STORE_ADDR", store.addr);
  setVar(env, "RINGFOLD_STORE_PORT", std::to_string(store.port));
  setVar(env, "RINGFOLD_SECRET", store.secret);
  setVar(env, "RINGFOLD_STORE_SERVER", "external");  // the launcher hosts it, not rank 0
  if (options.startTimeoutSeconds) {
    setVar(env, "RINGFOLD_START_TIMEOUT", formatSeconds(*options.startTimeoutSeconds));
  }
  if (!options.networkInterfaces.empty()) {
    setVar(env, "RINGFOLD_SOCKET_IFNAME", "=" + options.networkInterfaces);
  }
  // --verbose: the ranks say at start-up which transport joins them to which peers (info level),
  // unless a log level was chosen.
  if (options.verbose && !findEnv(env, "RINGFOLD_LOG_LEVEL") && !findEnv(env, "HOROVOD_LOG_LEVEL")) {
    setVar(env, "RINGFOLD_LOG_LEVEL", "info");
  }
}

}  // namespace

std::vector<std::string> buildRankEnvironment(const std::vector<std::string>& base,
                                              const LaunchOptions& options, const RankSlot& slot,
                                              const StoreEndpoint& store) {
  std::vector<std::string> env = base;
  for (const auto& x : options.exports) {
    if (x.value) setVar(env, x.name, *x.value);
  }
  setRunVariables(env, options, slot, store);
  return env;
}

std::vector<std::string> buildRemoteEnvironment(const std::vector<std::string>& base,
                                                const LaunchOptions& options, const RankSlot& slot,
                                                const StoreEndpoint& store) {
  std::vector<std::string> env;
  for (const auto& e : base) {
    if (e.rfind("RINGFOLD_", 0) == 0 || e.rfind("HOROVOD_", 0) == 0) env.push_back(e);
  }
  for (const auto& x : options.exports) {
    if (x.value) {
      setVar(env, x.name, *x.value);
    } else if (auto v = findEnv(base, x.name)) {
      setVar(env, x.name, *v);
    }
  }
  setRunVariables(env, options, slot, store);
  return env;
}

std::vector<std::string> currentEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

std::optional<std::string> findEnv(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& e : env) {
    auto eq = e.find('=');
    if (eq != std::string::npos && e.compare(0, eq, name) == 0 && eq == name.size()) {
      return e.substr(eq + 1);
    }
  }
  return std::nullopt;
}

}  // namespace ringfold::launcher
