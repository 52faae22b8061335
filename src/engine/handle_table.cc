#include "engine/handle_table.h"

#include "common/error.h"

namespace ringfold::engine {

Handle HandleTable::create() {
  std::lock_guard<std::mutex> lock(mu_);
  Handle h = next_++;
  states_.emplace(h, std::make_shared<State>());
  return h;
}

std::shared_ptr<HandleTable::State> HandleTable::find(Handle handle) const {
  auto it = states_.find(handle);
  if (it == states_.end()) RF_THROW(InvalidArgument, "unknown handle ", handle, " (never created, or already released)");
  return it->second;
}

void HandleTable::complete(Handle handle, Result result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(handle);
    if (it == states_.end() || it->second->done) return;
    it->second->result = std::move(result);
    it->second->done = true;
  }
  cv_.notify_all();
}

bool HandleTable::poll(Handle handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  return find(handle)->done;
}

const Result* HandleTable::wait(Handle handle, std::optional<std::chrono::milliseconds> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto state = find(handle);
  auto done = [&] { return state->done; };
  if (timeout) {
    if (!cv_.wait_for(lock, *timeout, done)) return nullptr;
  } else {
    cv_.wait(lock, done);
  }
  return &state->result;
}

void HandleTable::release(Handle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  find(handle);
  states_.erase(handle);
}

size_t HandleTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return states_.size();
}

}  // namespace ringfold::engine
