#include "bench/sim/link_model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace ringfold::sim {

namespace {

constexpr const char* kKeys[] = {"o", "gamma", "copy", "alpha_local", "beta_local", "alpha_remote", "beta_remote",
                                 "cpus", nullptr};

double* field(LinkModel& m, const std::string& key) {
  if (key == "o") return &m.o;
  if (key == "gamma") return &m.gamma;
  if (key == "copy") return &m.copy;
  if (key == "alpha_local") return &m.alphaLocal;
  if (key == "beta_local") return &m.betaLocal;
  if (key == "alpha_remote") return &m.alphaRemote;
  if (key == "beta_remote") return &m.betaRemote;
  if (key == "cpus") return &m.cpus;
  return nullptr;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

const char* const* linkModelKeys() { return kKeys; }

void LinkModel::set(const std::string& key, const std::string& value, const std::string& origin) {
  double* f = field(*this, key);
  if (f == nullptr) {
    std::string known;
    for (const char* const* k = kKeys; *k != nullptr; ++k) known += (known.empty() ? "" : " ") + std::string(*k);
    RF_THROW(InvalidArgument, origin, ": unknown model constant '", key, "' (known: ", known, ")");
  }
  const char* begin = value.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (end == begin || *end != '\0' || errno != 0 || !std::isfinite(v) || v < 0) {
    RF_THROW(InvalidArgument, origin, ": model constant ", key, " = '", value, "' is not a number >= 0");
  }
  if (key == "cpus" && (v != std::floor(v) || v > 4096)) {
    RF_THROW(InvalidArgument, origin, ": model constant cpus = '", value, "' is not a whole number of CPUs (0-4096)");
  }
  *f = v;
}

void LinkModel::parse(const std::string& text, const std::string& origin) {
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = origin + ":" + std::to_string(number);
    if (std::count(line.begin(), line.end(), '=') > 1) {
      // Several key=value words on one line (the text() form).
      std::istringstream words(line);
      std::string word;
      while (words >> word) parse(word, where);
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) RF_THROW(InvalidArgument, where, ": expected key = value, got '", line, "'");
    set(trim(line.substr(0, eq)), trim(line.substr(eq + 1)), where);
  }
}

void LinkModel::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) RF_THROW(InvalidArgument, "cannot read the model file ", path);
  std::stringstream text;
  text << in.rdbuf();
  parse(text.str(), path);
}

std::string LinkModel::text() const {
  std::ostringstream out;
  LinkModel copyOf = *this;
  for (const char* const* k = kKeys; *k != nullptr; ++k) {
    if (k != kKeys) out << ' ';
    out << *k << '=' << *field(copyOf, *k);
  }
  return out.str();
}

}  // namespace ringfold::sim
