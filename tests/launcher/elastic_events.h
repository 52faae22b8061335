// ElasticEvents: what the fake elastic workers (elastic_worker.cc) wrote into DIR/events, for
// the elastic launcher tests (tests/launcher/elastic_test.cc, tests/netns/elastic_test.cc).
// Every wait is bounded: it returns what it found when `timeout` passes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ringfold::launcher::testing {

std::vector<std::string> readEvents(const std::string& dir);
// Waits until `n` events start with `prefix`; returns those found.
std::vector<std::string> waitForEvents(const std::string& dir, const std::string& prefix, size_t n,
                                       std::chrono::milliseconds timeout);
// rank -> worker id, from the "join" events of incarnation `inc` (waits for `size` of them).
std::map<int, std::string> membersOf(const std::string& dir, int inc, size_t size, std::chrono::milliseconds timeout);
// The pid the worker `id` recorded in DIR/pid.<id>, or -1.
pid_t workerPid(const std::string& dir, const std::string& id);

}  // namespace ringfold::launcher::testing
