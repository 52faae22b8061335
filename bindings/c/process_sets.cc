// The C ABI's process-set functions: Horovod's horovod_*process_set* with its return codes.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "bindings/c/capi.h"

namespace ringfold {
namespace capi {
namespace {

using detail::concat;

int processSetFailure(int code, const std::string& what, const char* fn) {
  setError(fn, what);
  return code;
}

// Looks up a non-global set: its ranks, or a process-set error code (with the message set).
std::optional<std::vector<int>> setRanks(const Session& s, int id, const char* fn, int* code) {
  if (!s.engine) {
    *code = processSetFailure(HOROVOD_PROCESS_SET_ERROR_INIT, "ringfold is not initialized", fn);
    return std::nullopt;
  }
  try {
    return s.engine->processSetRanks(id);
  } catch (const ringfold::InvalidArgument&) {
    *code = processSetFailure(HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET, concat("unknown process set ", id), fn);
    return std::nullopt;
  }
}
}  // namespace
}  // namespace capi
}  // namespace ringfold

using namespace ringfold::capi;
using ringfold::detail::concat;

extern "C" {

RINGFOLD_API int horovod_add_process_set(const int* ranks, int nranks) noexcept {
  const char* fn = "horovod_add_process_set";
  return guardOr(fn, RINGFOLD_PROCESS_SET_ERROR_INVALID, [&]() -> int {
    const Session s = current();
    if (!s.engine) return processSetFailure(HOROVOD_PROCESS_SET_ERROR_INIT, "ringfold is not initialized", fn);
    if (!s.dynamic) {
      return processSetFailure(HOROVOD_PROCESS_SET_ERROR_DYNAMIC,
                               "process sets can be added after init only in dynamic mode "
                               "(RINGFOLD_DYNAMIC_PROCESS_SETS=1 or HOROVOD_DYNAMIC_PROCESS_SETS=1 at init)",
                               fn);
    }
    if (!s.engine->running()) {
      return processSetFailure(HOROVOD_PROCESS_SET_ERROR_SHUTDOWN, "the engine has stopped", fn);
    }
    if (nranks > s.engine->size()) {
      return processSetFailure(RINGFOLD_PROCESS_SET_ERROR_INVALID,
                               concat("nranks is ", nranks, " but the world has ", s.engine->size(),
                                      s.engine->size() == 1 ? " rank" : " ranks",
                                      ": a process set holds distinct ranks of it"),
                               fn);
    }
    std::vector<int> members;
    if (ranks != nullptr && nranks > 0) {
      members.assign(ranks, ranks + nranks);
    } else {
      for (int r = 0; r < s.engine->size(); ++r) members.push_back(r);
    }
    std::sort(members.begin(), members.end());
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] < 0 || members[i] >= s.engine->size() || (i && members[i] == members[i - 1])) {
        std::vector<int64_t> shown(members.begin(), members.end());
        return processSetFailure(RINGFOLD_PROCESS_SET_ERROR_INVALID,
                                 concat("ranks ", ringfold::engine::shapeString(shown), ": rank ", members[i],
                                        members[i] < 0 || members[i] >= s.engine->size()
                                            ? concat(" is out of range [0, ", s.engine->size(), ")")
                                            : std::string(" appears twice")),
                                 fn);
      }
    }
    for (int id : s.engine->processSetIds()) {
      std::vector<int> existing;
      try {
        existing = s.engine->processSetRanks(id);
      } catch (const ringfold::InvalidArgument&) {
        continue;  // removed meanwhile
      }
      if (existing == members) {
        std::vector<int64_t> shown(members.begin(), members.end());
        return processSetFailure(HOROVOD_PROCESS_SET_ERROR_EXISTING_SET,
                                 concat("process set ", id, " already has ranks ", ringfold::engine::shapeString(shown)),
                                 fn);
      }
    }
    try {
      return s.engine->addProcessSet(members);
    } catch (const std::exception& e) {
      if (!s.engine->running()) return processSetFailure(HOROVOD_PROCESS_SET_ERROR_SHUTDOWN, e.what(), fn);
      return processSetFailure(RINGFOLD_PROCESS_SET_ERROR_INVALID, e.what(), fn);
    }
  });
}

RINGFOLD_API int horovod_remove_process_set(int process_set_id) noexcept {
  const char* fn = "horovod_remove_process_set";
  return guardOr(fn, RINGFOLD_PROCESS_SET_ERROR_INVALID, [&]() -> int {
    const Session s = current();
    if (!s.engine) return processSetFailure(HOROVOD_PROCESS_SET_ERROR_INIT, "ringfold is not initialized", fn);
    if (!s.dynamic) {
      return processSetFailure(HOROVOD_PROCESS_SET_ERROR_DYNAMIC,
                               "process sets can be removed only in dynamic mode "
                               "(RINGFOLD_DYNAMIC_PROCESS_SETS=1 or HOROVOD_DYNAMIC_PROCESS_SETS=1 at init)",
                               fn);
    }
    if (process_set_id == 0) {
      return processSetFailure(HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET,
                               "the global process set (id 0) cannot be removed", fn);
    }
    const auto ids = s.engine->processSetIds();
    if (std::find(ids.begin(), ids.end(), process_set_id) == ids.end()) {
      return processSetFailure(HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET,
                               concat("unknown process set ", process_set_id), fn);
    }
    if (!s.engine->running()) {
      return processSetFailure(HOROVOD_PROCESS_SET_ERROR_SHUTDOWN, "the engine has stopped", fn);
    }
    try {
      s.engine->removeProcessSet(process_set_id);
    } catch (const std::exception& e) {
      if (!s.engine->running()) return processSetFailure(HOROVOD_PROCESS_SET_ERROR_SHUTDOWN, e.what(), fn);
      const auto now = s.engine->processSetIds();
      if (std::find(now.begin(), now.end(), process_set_id) == now.end()) {
        return processSetFailure(HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET, e.what(), fn);
      }
      return processSetFailure(RINGFOLD_PROCESS_SET_ERROR_INVALID, e.what(), fn);
    }
    return process_set_id;
  });
}


RINGFOLD_API int horovod_process_set_rank(int process_set_id) noexcept {
  if (process_set_id == 0) return horovod_rank();
  const char* fn = "horovod_process_set_rank";
  return guardOr(fn, RINGFOLD_PROCESS_SET_ERROR_INVALID, [&]() -> int {
    const Session s = current();
    int code = 0;
    if (!setRanks(s, process_set_id, fn, &code)) return code;
    const int rank = s.engine->processSetRank(process_set_id);
    if (rank < 0) {
      return processSetFailure(HOROVOD_PROCESS_SET_ERROR_FOREIGN_SET,
                               concat("rank ", s.engine->rank(), " is not in process set ", process_set_id), fn);
    }
    return rank;
  });
}

RINGFOLD_API int horovod_process_set_size(int process_set_id) noexcept {
  if (process_set_id == 0) return horovod_size();
  const char* fn = "horovod_process_set_size";
  return guardOr(fn, RINGFOLD_PROCESS_SET_ERROR_INVALID, [&]() -> int {
    const Session s = current();
    int code = 0;
    auto ranks = setRanks(s, process_set_id, fn, &code);
    return ranks ? static_cast<int>(ranks->size()) : code;
  });
}

RINGFOLD_API int horovod_process_set_included(int process_set_id) noexcept {
  clearError();
  if (process_set_id == 0) return 1;
  const char* fn = "horovod_process_set_included";
  return guardOr(fn, RINGFOLD_PROCESS_SET_ERROR_INVALID, [&]() -> int {
    const Session s = current();
    int code = 0;
    if (!setRanks(s, process_set_id, fn, &code)) return code;
    return s.engine->processSetRank(process_set_id) >= 0 ? 1 : 0;
  });
}

RINGFOLD_API int horovod_number_of_process_sets(void) noexcept {
  return guardOr("horovod_number_of_process_sets", 0, [] {
    const Session s = current();
    return s.engine ? static_cast<int>(s.engine->processSetIds().size()) : 0;
  });
}

RINGFOLD_API void horovod_process_set_ids(int* ids) noexcept {
  guardOr("horovod_process_set_ids", 0, [&] {
    const Session s = current();
    if (!s.engine) precondition("ringfold is not initialized");
    requireOut(ids, "ids");
    const auto v = s.engine->processSetIds();
    std::copy(v.begin(), v.end(), ids);
    return 0;
  });
}

RINGFOLD_API int horovod_process_set_ranks(int process_set_id, int* ranks) noexcept {
  const char* fn = "horovod_process_set_ranks";
  return guardOr(fn, RINGFOLD_PROCESS_SET_ERROR_INVALID, [&]() -> int {
    const Session s = current();
    int code = 0;
    auto v = setRanks(s, process_set_id, fn, &code);
    if (!v) return code;
    if (ranks == nullptr) return processSetFailure(RINGFOLD_PROCESS_SET_ERROR_INVALID, "ranks is NULL", fn);
    std::copy(v->begin(), v->end(), ranks);
    return 0;
  });
}

}  // extern "C"
