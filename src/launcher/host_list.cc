#include "launcher/host_list.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "launcher/usage_error.h"

namespace ringfold::launcher {

namespace {

[[noreturn]] void usageError(const std::string& what) { throw UsageError(what); }

void checkHostName(const std::string& host, const std::string& where) {
  if (host.empty()) usageError(where + " has no host name");
  if (host[0] == '-') usageError(where + ": host name '" + host + "' may not start with '-'");
  for (char c : host) {
    if (c == ' ' || c == '\t' || c == '\'' || c == '"' || c == '\\' || c == ';' || c == '/' ||
        static_cast<unsigned char>(c) < 0x20) {
      usageError(where + ": '" + host + "' is not a host name");
    }
  }
}

// Adds `h` to `hosts`, refusing a host seen before.
void addHost(std::vector<HostSlots>& hosts, std::set<std::string>& seen, HostSlots h,
             const std::string& where) {
  if (!seen.insert(h.host).second) {
    usageError(where + " lists host '" + h.host + "' more than once; give it once with all its slots");
  }
  hosts.push_back(std::move(h));
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

int parsePositiveInt(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v > 1000000 || v < -1000000) {
    usageError(what + " expects a positive integer, got '" + text + "'");
  }
  if (v <= 0) usageError(what + " must be at least 1, got " + text);
  return static_cast<int>(v);
}

std::vector<HostSlots> parseHosts(const std::string& text) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string entry = text.substr(start, comma - start);
    start = comma + 1;
    if (entry.empty()) usageError("-H '" + text + "' has an empty host entry");
    HostSlots h;
    auto colon = entry.rfind(':');
    if (colon == std::string::npos) {
      h.host = entry;
    } else {
      h.host = entry.substr(0, colon);
      h.slots = parsePositiveInt(entry.substr(colon + 1), "-H entry '" + entry + "': slots");
    }
    checkHostName(h.host, "-H entry '" + entry + "'");
    addHost(hosts, seen, std::move(h), "-H");
    if (comma == text.size()) break;
  }
  return hosts;
}

std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& fileName) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    const std::string where = fileName + ":" + std::to_string(lineNo);
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(trim(line));
    std::string host;
    if (!(words >> host)) continue;  // blank or comment-only
    HostSlots h;
    bool slotsGiven = false;
    if (auto colon = host.rfind(':'); colon != std::string::npos) {  // "host:slots"
      h.slots = parsePositiveInt(host.substr(colon + 1), where + ": slots of '" + host + "'");
      host.resize(colon);
      slotsGiven = true;
    }
    h.host = host;
    checkHostName(h.host, where);
    std::string word;
    while (words >> word) {
      if (word.rfind("slots=", 0) == 0 && !slotsGiven) {
        h.slots = parsePositiveInt(word.substr(6), where + ": slots");
        slotsGiven = true;
      } else if (word.rfind("max_slots=", 0) == 0) {
        // Open MPI's cap on oversubscription: ranks never exceed slots here, so nothing to do.
        parsePositiveInt(word.substr(10), where + ": max_slots");
      } else {
        usageError(where + ": unexpected '" + word + "' (expected 'host slots=N')");
      }
    }
    addHost(hosts, seen, std::move(h), where);
  }
  if (hosts.empty()) usageError("hostfile " + fileName + " lists no host");
  return hosts;
}

std::vector<HostSlots> readHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) usageError("cannot read hostfile '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parseHostfile(text.str(), path);
}

}  // namespace ringfold::launcher
