// bootstrapFromEnvironment(): the rules, in the order they are applied.
//
//  1. RINGFOLD_X and HOROVOD_X (X = RANK, SIZE, LOCAL_RANK, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE)
//     must agree when both are set.
//  2. Source = the first name set whose rank variable is set: ringfold, horovod, torchrun,
//     openmpi, slurm; else TF_CONFIG when set ("tf_config", see bootstrap.h); else "none" (one
//     process). A set RINGFOLD_/HOROVOD_SIZE without its rank
//     is an error (other launchers' size variables alone are ignored: an salloc shell sets
//     SLURM_NTASKS without being a rank).
//  3. The size variable is required; local rank/size are required unless size == 1 (then 0/1).
//     slurm: SLURM_LOCALID, and the local size from SLURM_NTASKS_PER_NODE, else this node's
//     (SLURM_NODEID) entry of SLURM_TASKS_PER_NODE.
//  4. Cross rank/size as documented in bootstrap.h (slurm: SLURM_NODEID, exact for any task
//     distribution; otherwise block placement is assumed, -1 when size % localSize != 0).
//  5. Store address: RINGFOLD_STORE_ADDR, HOROVOD_GLOO_RENDEZVOUS_ADDR, MASTER_ADDR; else
//     slurm: first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST; else Open MPI on one host:
//     127.0.0.1.
//     Store port: RINGFOLD_STORE_PORT; else HOROVOD_GLOO_RENDEZVOUS_PORT + 1 (horovodrun's HTTP
//     server holds that port); else MASTER_PORT, + 1 under torchrun (TORCHELASTIC_RUN_ID or
//     TORCHELASTIC_USE_AGENT_STORE set: torchrun's own store holds MASTER_PORT); else slurm /
//     Open MPI: 29500 + job % 1000, job = OMPI_MCA_ess_base_jobid, or for slurm
//     SLURM_JOB_ID + 97 * SLURM_STEP_ID (so that concurrent steps of one job differ).
//  6. Secret: RINGFOLD_SECRET; with the RINGFOLD_* names (ringfoldrun, or ranks started by hand)
//     it is required. Otherwise it is derived as
//     hex(SHA-256("ringfold-job-secret-v1:" NAME "=" VALUE)) from the first job identity set:
//     TORCHELASTIC_RUN_ID, SLURM_JOB_ID (SLURM_JOB_ID.SLURM_STEP_ID=J.S when slurm started the
//     ranks and SLURM_STEP_ID is set), OMPI_MCA_ess_base_jobid,
//     HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT, MASTER_ADDR:MASTER_PORT — with a warning.
//  7. Store server: rank 0 hosts it (hostStore) under every name set, unless
//     RINGFOLD_STORE_SERVER=external (set by ringfoldrun, which hosts the store itself).
//  A single process (size 1) gets no store address, port or secret.
#include "rendezvous/bootstrap.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>
#include <cstdlib>
#include <atomic>
#include <vector>
#include <optional>

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"
#include "rendezvous/secret.h"

namespace ringfold::rendezvous {
namespace detail {
// (tasks, repeat) items of a slurm tasks-per-node list.
std::vector<std::pair<int, int>> parseTasksPerNode(const std::string& list, const std::string& what);
}  // namespace detail

namespace {

using Var = std::pair<std::string, std::string>;  // (value, variable name)

std::atomic<bool> gDerivedSecretWarned{false};  // warn once per process

// Launcher variables that are not ringfold tunables are read here (documented in params.def
// under RINGFOLD_RANK & co.); ringfold's own go through params::kX.
std::optional<Var> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return Var{v, name};
}

int toInt(const Var& v) {
  int64_t n = params::parseInt(v.first, v.second);
  if (n < INT32_MIN || n > INT32_MAX) RF_THROW(InvalidArgument, v.second, "='", v.first, "' is out of range");
  return static_cast<int>(n);
}

struct NameSet {
  const char* source;
  const char* rank;
  const char* size;
  const char* localRank;
  const char* localSize;  // nullptr: derived (slurm)
};

constexpr NameSet kSets[] = {
    {"ringfold", "RINGFOLD_RANK", "RINGFOLD_SIZE", "RINGFOLD_LOCAL_RANK", "RINGFOLD_LOCAL_SIZE"},
    {"horovod", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

void checkAgreement() {
  static const char* kSuffixes[] = {"RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"};
  for (const char* s : kSuffixes) {
    std::string a = std::string("RINGFOLD_") + s, b = std::string("HOROVOD_") + s;
    auto va = env(a.c_str()), vb = env(b.c_str());
    if (va && vb && va->first != vb->first) {
      RF_THROW(InvalidArgument, a, "='", va->first, "' and ", b, "='", vb->first,
               "' disagree; unset one of them or make them equal");
    }
  }
  for (const NameSet* set : {&kSets[0], &kSets[1]}) {
    if (!env(set->rank) && env(set->size)) {
      RF_THROW(InvalidArgument, set->size, " is set but ", set->rank, " is not; set both");
    }
  }
}

void requireLess(int a, const Var& va, int b, const Var& vb) {
  if (!(a < b)) {
    RF_THROW(InvalidArgument, va.second, "='", va.first, "' must be less than ", vb.second, "='",
             vb.first, "'");
  }
}

uint64_t jobNumber(const Var& v) {
  char* end = nullptr;
  unsigned long long n = std::strtoull(v.first.c_str(), &end, 10);
  if (end != nullptr && *end == '\0') return n;
  uint64_t h = 1469598103934665603ull;  // FNV-1a of a non-numeric id: stable across ranks
  for (unsigned char c : v.first) h = (h ^ c) * 1099511628211ull;
  return h;
}

// SLURM_STEP_ID of ranks srun started: every task of a step sees the same one. Absent, or one of
// Slurm's pseudo steps (batch, extern, interactive: 0xFFFFFFF0 and up), it is none.
std::optional<uint64_t> slurmStep() {
  auto s = env("SLURM_STEP_ID");
  if (!s) return std::nullopt;
  char* end = nullptr;
  unsigned long long n = std::strtoull(s->first.c_str(), &end, 10);
  if (end == nullptr || *end != '\0' || n >= 0xFFFFFFF0ull) return std::nullopt;
  return n;
}

std::string hexSha256(const std::string& text) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), d);
  return toHex(d, sizeof d);
}

void localFromSet(const NameSet& set, int size, BootstrapInfo& info, Var& lrVar, Var& lsVar) {
  auto lr = env(set.localRank);
  if (set.localSize == nullptr) {  // slurm
    auto perNode = env("SLURM_NTASKS_PER_NODE");
    if (!perNode) perNode = env("SLURM_TASKS_PER_NODE");
    if (size == 1 && (!lr || !perNode)) return;
    if (!lr) RF_THROW(InvalidArgument, "SLURM_PROCID is set but SLURM_LOCALID is not");
    if (!perNode) {
      RF_THROW(InvalidArgument,
               "slurm: neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set; set "
               "RINGFOLD_LOCAL_SIZE");
    }
    // SLURM_NTASKS_PER_NODE is one count for every node; SLURM_TASKS_PER_NODE lists each.
    int nodeId = -1;
    if (perNode->second == "SLURM_TASKS_PER_NODE") {
      if (auto n = env("SLURM_NODEID")) nodeId = toInt(*n);
    }
    info.localRank = toInt(*lr);
    info.localSize = detail::slurmTasksOnNode(perNode->first, nodeId, perNode->second);
    lrVar = *lr;
    lsVar = *perNode;
    return;
  }
  auto ls = env(set.localSize);
  if (size == 1 && (!lr || !ls)) return;
  if (!lr) RF_THROW(InvalidArgument, set.rank, " is set but ", set.localRank, " is not");
  if (!ls && std::string_view(set.source) == "torchrun") {
    // Azure ML sets torchrun's names but not LOCAL_WORLD_SIZE: take RINGFOLD_LOCAL_SIZE, else
    // leave it unknown (-1); the engine then counts the ranks on each host by host name.
    if (auto given = params::kLocalSize.lookup()) {
      ls = *given;
    } else {
      info.localRank = toInt(*lr);
      info.localSize = -1;
      lrVar = *lr;
      return;
    }
  }
  if (!ls) RF_THROW(InvalidArgument, set.rank, " is set but ", set.localSize, " is not");
  info.localRank = toInt(*lr);
  info.localSize = toInt(*ls);
  lrVar = *lr;
  lsVar = *ls;
}

void deriveCross(BootstrapInfo& info) {
  auto cr = params::kCrossRank.lookup();
  auto cs = params::kCrossSize.lookup();
  if (cr || cs) {
    if (!cr) RF_THROW(InvalidArgument, cs->second, " is set but ", params::kCrossRank.name, " is not");
    if (!cs) RF_THROW(InvalidArgument, cr->second, " is set but ", params::kCrossSize.name, " is not");
    info.crossRank = toInt(*cr);
    info.crossSize = toInt(*cs);
    if (info.crossRank < 0) RF_THROW(InvalidArgument, cr->second, "='", cr->first, "' is negative");
    requireLess(info.crossRank, *cr, info.crossSize, *cs);
    return;
  }
  if (info.source == "torchrun") {
    // torchrun's GROUP_RANK; Azure ML's NODE_RANK.
    auto gr = env("GROUP_RANK");
    if (!gr) gr = env("NODE_RANK");
    if (gr) {
      info.crossRank = toInt(*gr);
      if (auto gws = env("GROUP_WORLD_SIZE")) {
        info.crossSize = toInt(*gws);
        requireLess(info.crossRank, *gr, info.crossSize, *gws);
        return;
      }
      if (info.localSize > 0 && info.size % info.localSize == 0) {
        info.crossSize = info.size / info.localSize;
        Var derived{std::to_string(info.crossSize), "WORLD_SIZE/LOCAL_WORLD_SIZE"};
        requireLess(info.crossRank, *gr, info.crossSize, derived);
        return;
      }
      if (info.localSize < 0) {  // the node index is known, the node count is not (Azure ML)
        info.crossSize = -1;
        return;
      }
    }
  }
  if (info.source == "slurm") {
    // The node index is exact whatever the task distribution (block, cyclic, uneven).
    auto nodeId = env("SLURM_NODEID");
    auto tpn = env("SLURM_TASKS_PER_NODE");
    if (nodeId && tpn) {
      int64_t nodes = 0;
      for (const auto& item : detail::parseTasksPerNode(tpn->first, tpn->second)) nodes += item.second;
      info.crossRank = toInt(*nodeId);
      info.crossSize = static_cast<int>(std::min<int64_t>(nodes, INT32_MAX));
      Var derived{std::to_string(nodes), "the node count of SLURM_TASKS_PER_NODE"};
      requireLess(info.crossRank, *nodeId, info.crossSize, derived);
      return;
    }
  }
  if (info.localSize > 0 && info.size % info.localSize == 0) {
    info.crossRank = info.rank / info.localSize;
    info.crossSize = info.size / info.localSize;
  } else {
    info.crossRank = -1;
    info.crossSize = -1;
  }
}

// "host:port" -> (host, port text); IPv6 hosts may be bracketed: "[::1]:2222".
std::pair<std::string, std::string> splitHostPort(const std::string& task) {
  size_t colon = task.rfind(':');
  std::string host = task.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, task.substr(colon + 1)};
}

void deriveStore(BootstrapInfo& info, const detail::TfConfig* tf) {
  if (auto a = params::kStoreAddr.lookup()) {
    info.storeAddr = a->first;
  } else if (tf != nullptr) {
    info.storeAddr = splitHostPort(tf->tasks.front()).first;
  } else if (info.source == "slurm") {
    auto list = env("SLURM_STEP_NODELIST");
    if (!list) list = env("SLURM_JOB_NODELIST");
    if (list) info.storeAddr = detail::firstSlurmHost(list->first);
  } else if (info.source == "openmpi" && info.localSize == info.size) {
    info.storeAddr = "127.0.0.1";
  }
  if (info.storeAddr.empty()) {
    RF_THROW(InvalidArgument, "no rendezvous store address for ", info.size, " ranks (source ",
             info.source, "): set ", params::kStoreAddr.name, " (or MASTER_ADDR) to rank 0's host");
  }

  std::optional<Var> portVar;
  int offset = 0;
  if (auto p = env(params::kStorePort.name)) {
    portVar = p;
  } else if (auto hp = env("HOROVOD_GLOO_RENDEZVOUS_PORT")) {
    portVar = hp;
    offset = 1;
  } else if (auto mp = env("MASTER_PORT")) {
    portVar = mp;
    offset = (env("TORCHELASTIC_RUN_ID") || env("TORCHELASTIC_USE_AGENT_STORE")) ? 1 : 0;
  } else if (tf != nullptr) {
    portVar = Var{splitHostPort(tf->tasks.front()).second, "the port of TF_CONFIG's first task"};
    offset = 1;  // TensorFlow's own gRPC server may listen on the listed port
  }
  if (portVar) {
    int p = toInt(*portVar);
    if (p < 1 || p + offset > 65535) {
      RF_THROW(InvalidArgument, portVar->second, "='", portVar->first, "' is not a usable TCP port",
               offset ? " (ringfold uses it + 1)" : "");
    }
    info.storePort = p + offset;
    return;
  }
  std::optional<Var> job;
  uint64_t step = 0;
  if (info.source == "slurm") {
    job = env("SLURM_JOB_ID");
    step = slurmStep().value_or(0);
  }
  if (info.source == "openmpi") job = env("OMPI_MCA_ess_base_jobid");
  if (!job) {
    RF_THROW(InvalidArgument, "no rendezvous store port for ", info.size, " ranks (source ",
             info.source, "): set ", params::kStorePort.name, " (or MASTER_PORT)");
  }
  info.storePort = 29500 + static_cast<int>((jobNumber(*job) % 1000 + 97 * (step % 1000)) % 1000);
}

void deriveSecret(BootstrapInfo& info, const detail::TfConfig* tf) {
  if (auto s = params::kSecret.lookup()) {
    info.secret = s->first;
    return;
  }
  if (info.source == "ringfold") {
    RF_THROW(InvalidArgument, params::kSecret.name,
             " is not set; ringfoldrun sets it for every rank (set it yourself when setting "
             "RINGFOLD_RANK by hand: any string shared by the job's ranks)");
  }
  std::optional<Var> id;
  for (const char* name : {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid"}) {
    // torchrun's default --rdzv-id is "none": the same for every job, so no identity at all.
    if ((id = env(name)) && id->first != "none") break;
    id.reset();
  }
  // Concurrent steps of one Slurm job must not share a secret (nor, above, a port).
  if (id && id->second == "SLURM_JOB_ID" && info.source == "slurm") {
    if (auto step = slurmStep()) id = Var{id->first + "." + std::to_string(*step), "SLURM_JOB_ID.SLURM_STEP_ID"};
  }
  if (!id && tf != nullptr) id = Var{tf->cluster, "TF_CONFIG's cluster"};
  if (!id) {
    for (auto [a, p] : {std::pair{"HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT"},
                        std::pair{"MASTER_ADDR", "MASTER_PORT"}}) {
      auto va = env(a), vp = env(p);
      if (va && vp) {
        id = Var{va->first + ":" + vp->first, std::string(a) + ":" + p};
        break;
      }
    }
  }
  if (!id) {
    RF_THROW(InvalidArgument, params::kSecret.name,
             " is not set and there is no job identity (TORCHELASTIC_RUN_ID, SLURM_JOB_ID, "
             "OMPI_MCA_ess_base_jobid, MASTER_ADDR+MASTER_PORT) to derive one from; set ",
             params::kSecret.name, " to the same string on every rank");
  }
  info.secret = hexSha256("ringfold-job-secret-v1:" + id->second + "=" + id->first);
  if (!gDerivedSecretWarned.exchange(true)) {
    RF_LOG(kWarning) << params::kSecret.name << " is not set; the rendezvous store secret is derived from "
                     << id->second << ", which only protects against accidental connections from other "
                     << "jobs, not against anyone who can read it. Set " << params::kSecret.name
                     << " (e.g. `export RINGFOLD_SECRET=$(openssl rand -hex 32)`) for a real secret.";
  }
}

// RINGFOLD_STORE_SERVER: rank0 (default) or external (ringfoldrun hosts the store itself).
bool storeIsExternal() {
  auto v = params::kStoreServer.lookup();
  if (!v || v->first == "rank0") return false;
  if (v->first == "external") return true;
  RF_THROW(InvalidArgument, v->second, "='", v->first,
           "' is not a store server: use rank0 (rank 0 hosts the store) or external (ringfoldrun "
           "or another process hosts it)");
}

}  // namespace

namespace detail {

std::string firstSlurmHost(const std::string& nodeList) {
  std::string out;
  size_t i = 0;
  while (i < nodeList.size() && nodeList[i] != ',') {
    if (nodeList[i] != '[') {
      out += nodeList[i++];
      continue;
    }
    size_t close = nodeList.find(']', i);
    RF_ENFORCE(close != std::string::npos, "slurm node list '", nodeList, "' has an unclosed '['");
    size_t j = i + 1;
    while (j < close && nodeList[j] != ',' && nodeList[j] != '-') out += nodeList[j++];
    i = close + 1;
  }
  RF_ENFORCE(!out.empty(), "slurm node list '", nodeList, "' names no host");
  return out;
}

std::vector<std::pair<int, int>> parseTasksPerNode(const std::string& list, const std::string& what) {
  auto bad = [&]() {
    RF_THROW(InvalidArgument, what, "='", list, "' is not a slurm tasks-per-node list");
  };
  std::vector<std::pair<int, int>> out;  // (tasks, repeat)
  size_t i = 0;
  while (i < list.size()) {
    size_t end = list.find(',', i);
    std::string item = list.substr(i, end == std::string::npos ? std::string::npos : end - i);
    i = end == std::string::npos ? list.size() : end + 1;
    int64_t repeat = 1;
    size_t paren = item.find('(');
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item[paren + 1] != 'x' || item.back() != ')') bad();
      repeat = params::parseInt(item.substr(paren + 2, item.size() - paren - 3), what);
      item = item.substr(0, paren);
    }
    int64_t tasks = params::parseInt(item, what);
    if (tasks < 1 || repeat < 1 || tasks > INT32_MAX || repeat > INT32_MAX) bad();
    out.emplace_back(static_cast<int>(tasks), static_cast<int>(repeat));
  }
  if (out.empty()) bad();
  return out;
}

int slurmTasksOnNode(const std::string& tasksPerNode, int nodeId, const std::string& what) {
  auto items = parseTasksPerNode(tasksPerNode, what);
  if (nodeId < 0) return items.front().first;
  int64_t node = 0;
  for (const auto& [tasks, repeat] : items) {
    if (nodeId < node + repeat) return tasks;
    node += repeat;
  }
  RF_THROW(InvalidArgument, what, "='", tasksPerNode, "' lists ", node,
           " nodes but SLURM_NODEID is ", nodeId);
}

void resetDerivedSecretWarning() { gDerivedSecretWarned.store(false); }

}  // namespace detail

namespace {

// The "tf_config" source (bootstrap.h): ranks, hosts and store from TensorFlow's TF_CONFIG.
BootstrapInfo bootstrapFromTfConfig(const std::string& json) {
  detail::TfConfig tf = detail::parseTfConfig(json);
  BootstrapInfo info;
  info.source = "tf_config";
  info.rank = tf.rank;
  info.size = static_cast<int>(tf.tasks.size());
  // Local and cross placement from the host names, exact for any placement.
  std::vector<std::string> hosts;
  const std::string myHost = splitHostPort(tf.tasks[tf.rank]).first;
  info.localRank = 0;
  info.localSize = 0;
  for (int r = 0; r < info.size; ++r) {
    std::string host = splitHostPort(tf.tasks[r]).first;
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    if (host == myHost) {
      if (r < tf.rank) ++info.localRank;
      ++info.localSize;
    }
  }
  info.crossRank = static_cast<int>(std::find(hosts.begin(), hosts.end(), myHost) - hosts.begin());
  info.crossSize = static_cast<int>(hosts.size());
  if (params::kCrossRank.lookup() || params::kCrossSize.lookup()) deriveCross(info);
  setLogRank(info.rank);
  if (info.size == 1) return info;
  deriveStore(info, &tf);
  deriveSecret(info, &tf);
  info.hostStore = info.rank == 0 && !storeIsExternal();
  return info;
}

}  // namespace

BootstrapInfo bootstrapFromEnvironment() {
  checkAgreement();
  BootstrapInfo info;
  const NameSet* set = nullptr;
  for (const auto& s : kSets) {
    if (env(s.rank)) {
      set = &s;
      break;
    }
  }
  if (set == nullptr) {
    if (auto tfVar = env("TF_CONFIG")) return bootstrapFromTfConfig(tfVar->first);
    info.source = "none";
    return info;
  }
  info.source = set->source;
  auto rankVar = *env(set->rank);
  auto sizeVar = env(set->size);
  if (!sizeVar) RF_THROW(InvalidArgument, set->rank, " is set but ", set->size, " is not");
  info.rank = toInt(rankVar);
  info.size = toInt(*sizeVar);
  if (info.rank < 0) RF_THROW(InvalidArgument, rankVar.second, "='", rankVar.first, "' is negative");
  if (info.size < 1) RF_THROW(InvalidArgument, sizeVar->second, "='", sizeVar->first, "' must be at least 1");
  requireLess(info.rank, rankVar, info.size, *sizeVar);

  Var lrVar{"0", "local rank"}, lsVar{"1", "local size"};
  localFromSet(*set, info.size, info, lrVar, lsVar);
  if (info.localRank < 0) RF_THROW(InvalidArgument, lrVar.second, "='", lrVar.first, "' is negative");
  if (info.localSize != -1 && (info.localSize < 1 || info.localSize > info.size)) {
    RF_THROW(InvalidArgument, lsVar.second, "='", lsVar.first, "' must be between 1 and ",
             sizeVar->second, "='", sizeVar->first, "'");
  }
  if (info.localSize != -1) requireLess(info.localRank, lrVar, info.localSize, lsVar);
  deriveCross(info);
  setLogRank(info.rank);
  if (info.size == 1) return info;

  deriveStore(info, nullptr);
  deriveSecret(info, nullptr);
  info.hostStore = info.rank == 0 && !storeIsExternal();
  return info;
}

}  // namespace ringfold::rendezvous
