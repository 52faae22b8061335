#include "common/params.h"

#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace ringfold::params {

#define RF_PARAM(id, name, aliases, def, area, doc) const Param id{name, aliases, def, area, doc};
#include "common/params.def"
#undef RF_PARAM

const std::vector<const Param*>& all() {
  static const std::vector<const Param*> list = {
#define RF_PARAM(id, name, aliases, def, area, doc) &id,
#include "common/params.def"
#undef RF_PARAM
  };
  return list;
}

std::optional<std::pair<std::string, std::string>> Param::lookup() const {
  auto tryName = [](const std::string& n) -> std::optional<std::pair<std::string, std::string>> {
    const char* v = std::getenv(n.c_str());
    if (v != nullptr && *v != '\0') return std::make_pair(std::string(v), n);
    return std::nullopt;
  };
  if (auto v = tryName(name)) return v;
  std::stringstream ss(aliases);
  std::string alias;
  while (std::getline(ss, alias, ',')) {
    if (alias.empty()) continue;
    if (auto v = tryName(alias)) return v;
  }
  return std::nullopt;
}

std::string Param::str() const {
  auto v = lookup();
  return v ? v->first : std::string(defaultValue);
}

namespace {
std::pair<std::string, std::string> valueAndSource(const Param& p) {
  auto v = p.lookup();
  if (v) return *v;
  return {p.defaultValue, std::string(p.name) + " (default)"};
}
}  // namespace

int64_t parseInt(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0') {
    RF_THROW(InvalidArgument, what, "='", text, "' is not an integer");
  }
  return v;
}

uint64_t parseBytes(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || end == text.c_str() || v < 0) {
    RF_THROW(InvalidArgument, what, "='", text, "' is not a byte count (examples: 4096, 64K, 1M, 2G)");
  }
  std::string suffix(end);
  double mult = 1;
  if (suffix.empty() || suffix == "B") mult = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KiB" || suffix == "k") mult = 1024.0;
  else if (suffix == "M" || suffix == "MB" || suffix == "MiB") mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GB" || suffix == "GiB") mult = 1024.0 * 1024 * 1024;
  else RF_THROW(InvalidArgument, what, "='", text, "' has an unknown unit '", suffix, "' (use K, M or G)");
  return static_cast<uint64_t>(v * mult);
}

int64_t Param::asInt() const {
  auto [v, src] = valueAndSource(*this);
  return parseInt(v, src);
}

double Param::asDouble() const {
  auto [v, src] = valueAndSource(*this);
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end == nullptr || *end != '\0') RF_THROW(InvalidArgument, src, "='", v, "' is not a number");
  return d;
}

bool Param::asBool() const {
  auto [v, src] = valueAndSource(*this);
  std::string l;
  for (char c : v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off" || l.empty()) return false;
  RF_THROW(InvalidArgument, src, "='", v, "' is not a boolean (use 1/0, true/false, yes/no, on/off)");
}

uint64_t Param::asBytes() const {
  auto [v, src] = valueAndSource(*this);
  return parseBytes(v, src);
}

std::chrono::milliseconds Param::asSeconds() const {
  double s = asDouble();
  if (s < 0) RF_THROW(InvalidArgument, name, " must not be negative");
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

std::string markdownTable() {
  std::ostringstream out;
  out << "| Variable | Aliases | Default | Meaning |\n|---|---|---|---|\n";
  for (const Param* p : all()) {
    std::string aliases = p->aliases;
    std::string shown;
    std::stringstream ss(aliases);
    std::string a;
    while (std::getline(ss, a, ',')) shown += (shown.empty() ? "" : ", ") + ("`" + a + "`");
    out << "| `" << p->name << "` | " << shown << " | " << (*p->defaultValue ? std::string("`") + p->defaultValue + "`" : "")
        << " | " << p->doc << " |\n";
  }
  return out.str();
}

}  // namespace ringfold::params
