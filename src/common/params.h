// Every environment variable ringfold reads is declared once, in params.def, as a Param:
// its RINGFOLD_* name, Horovod/NCCL aliases, default and documentation. Code reads a variable
// only through its Param, so the table in docs/environment.md (generated from the same list)
// cannot drift.
//
//   int64_t n = params::kSocketsPerPeer.asInt();
//
// Lookup order: the RINGFOLD_* name, then each alias in order, then the default. A value that
// does not parse throws InvalidArgument naming the variable that supplied it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringfold::params {

struct Param {
  const char* name;
  const char* aliases;  // comma-separated, may be empty
  const char* defaultValue;
  const char* area;
  const char* doc;

  // The environment value and the variable that supplied it, if any name is set (non-empty).
  std::optional<std::pair<std::string, std::string>> lookup() const;
  bool isSet() const { return lookup().has_value(); }
  std::string str() const;            // value or default
  int64_t asInt() const;              // integer
  double asDouble() const;            // floating point
  bool asBool() const;                // 1/0, true/false, yes/no, on/off
  uint64_t asBytes() const;           // 4096, 64K, 1M, 2G (binary units)
  std::chrono::milliseconds asSeconds() const;  // seconds, fractions allowed
};

#define RF_PARAM(id, name, aliases, def, area, doc) extern const Param id;
#include "common/params.def"
#undef RF_PARAM

// All declared params, in declaration order.
const std::vector<const Param*>& all();

// The environment-variable table of docs/environment.md, as Markdown.
std::string markdownTable();

// Parsing helpers shared with other env readers (bootstrap): `what` names the variable.
int64_t parseInt(const std::string& text, const std::string& what);
uint64_t parseBytes(const std::string& text, const std::string& what);

}  // namespace ringfold::params
