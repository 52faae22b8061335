// RankEnvironment: the environment one rank starts with.
//
// Built from, in order (a later source replaces an earlier value of the same name):
//   1. the launcher's environment (`base`, "NAME=value" strings as in environ) for a local
//      rank; for a remote rank (buildRemoteEnvironment) only the launcher's RINGFOLD_* and
//      HOROVOD_* variables (the job's tunables): the rest of its environment is the remote
//      login's, as with mpirun;
//   2. each -x export: VAR=value sets VAR; a bare VAR keeps the launcher's value (forwarded to
//      remote ranks; left out if the launcher has no such variable);
//   3. PYTHONUNBUFFERED=1 and the rank's identity and store, which always win:
//        RINGFOLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE,
//        RINGFOLD_STORE_ADDR, RINGFOLD_STORE_PORT, RINGFOLD_SECRET,
//        RINGFOLD_STORE_SERVER=external (the launcher hosts the store; rank 0 must not),
//        HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE, HOROVOD_HOSTNAME,
//        RINGFOLD_START_TIMEOUT (only when --start-timeout was given),
//        RINGFOLD_SOCKET_IFNAME="=<list>" (only when --network-interface was given).
// Variable names follow src/rendezvous/bootstrap.h, which is how ranks read them back.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/launch_options.h"
#include "launcher/rank_layout.h"

namespace ringfold::launcher {

struct StoreEndpoint {
  std::string addr;    // as the ranks must dial it
  int port = 0;
  std::string secret;  // job secret, text (hex from generateSecret())
};

std::vector<std::string> buildRankEnvironment(const std::vector<std::string>& base,
                                              const LaunchOptions& options, const RankSlot& slot,
                                              const StoreEndpoint& store);

// The variables a remote rank is started with (on top of its login environment).
std::vector<std::string> buildRemoteEnvironment(const std::vector<std::string>& base,
                                                const LaunchOptions& options, const RankSlot& slot,
                                                const StoreEndpoint& store);

// The calling process's environment (environ) as "NAME=value" strings.
std::vector<std::string> currentEnvironment();

// Value of `name` in an environment list, if present.
std::optional<std::string> findEnv(const std::vector<std::string>& env, const std::string& name);

}  // namespace ringfold::launcher
