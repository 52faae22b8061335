// TF_CONFIG (tf_config.h): a minimal JSON reader and the cluster's training tasks.
#include "rendezvous/tf_config.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/params.h"

namespace ringfold::rendezvous::detail {

namespace {

// A minimal JSON reader for TF_CONFIG (objects, arrays, strings, numbers, true/false/null).
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  std::string text;  // string value, or the number's text
  std::vector<Json> items;
  struct Member;                 // {key, value}: a pair needs Json complete, a vector does not
  std::vector<Member> members;
  const Json* get(const std::string& key) const;
};

struct Json::Member {
  std::string key;
  Json value;
};

const Json* Json::get(const std::string& key) const {
  for (const Member& m : members) {
    if (m.key == key) return &m.value;
  }
  return nullptr;
}

class JsonReader {
 public:
  explicit JsonReader(const std::string& s) : s_(s) {}
  Json document() {
    Json v = value(0);
    skip();
    if (i_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    RF_THROW(InvalidArgument, "TF_CONFIG is not valid JSON: ", what, " at offset ", i_);
  }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    skip();
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) fail("short \\u escape");
          unsigned code = 0;
          for (int k = 0; k < 4; ++k) {
            char h = s_[i_++];
            code <<= 4;
            if (h >= '0' && h <= '9') code |= h - '0';
            else if (h >= 'a' && h <= 'f') code |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') code |= h - 'A' + 10;
            else fail("bad \\u escape");
          }
          // UTF-8 of a code unit (host names are ASCII; surrogates pass through as is).
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: fail("bad escape");
      }
    }
  }
  Json value(int depth) {
    if (depth > 64) fail("nesting too deep");
    skip();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    char c = s_[i_];
    if (c == '{') {
      v.kind = Json::kObject;
      ++i_;
      skip();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return v;
      }
      while (true) {
        std::string key = string();
        expect(':');
        v.members.push_back(Json::Member{key, value(depth + 1)});
        skip();
        if (i_ < s_.size() && s_[i_] == ',') { ++i_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::kArray;
      ++i_;
      skip();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return v;
      }
      while (true) {
        v.items.push_back(value(depth + 1));
        skip();
        if (i_ < s_.size() && s_[i_] == ',') { ++i_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::kString;
      v.text = string();
      return v;
    }
    for (const char* word : {"true", "false", "null"}) {
      if (s_.compare(i_, std::strlen(word), word) == 0) {
        i_ += std::strlen(word);
        v.kind = word[0] == 'n' ? Json::kNull : Json::kBool;
        v.text = word;
        return v;
      }
    }
    size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                              s_[i_] == 'e' || s_[i_] == 'E' || s_[i_] == '+' || s_[i_] == '-')) ++i_;
    if (i_ == start || (i_ == start + 1 && s_[start] == '-')) fail("unexpected character");
    v.kind = Json::kNumber;
    v.text = s_.substr(start, i_ - start);
    return v;
  }
  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

TfConfig parseTfConfig(const std::string& json) {
  Json doc = JsonReader(json).document();
  if (doc.kind != Json::kObject) RF_THROW(InvalidArgument, "TF_CONFIG must be a JSON object");
  const Json* cluster = doc.get("cluster");
  if (cluster == nullptr || cluster->kind != Json::kObject) {
    RF_THROW(InvalidArgument, "TF_CONFIG has no \"cluster\" object");
  }
  const Json* task = doc.get("task");
  if (task == nullptr || task->kind != Json::kObject) RF_THROW(InvalidArgument, "TF_CONFIG has no \"task\" object");
  const Json* type = task->get("type");
  const Json* index = task->get("index");
  if (type == nullptr || type->kind != Json::kString) {
    RF_THROW(InvalidArgument, "TF_CONFIG's task has no string \"type\"");
  }
  int taskIndex = 0;
  if (index != nullptr) {
    if (index->kind != Json::kNumber) RF_THROW(InvalidArgument, "TF_CONFIG's task \"index\" is not a number");
    taskIndex = static_cast<int>(params::parseInt(index->text, "TF_CONFIG task.index"));
  }
  TfConfig out;
  std::string canonical;
  auto tasksOf = [&](const char* name) {
    std::vector<std::string> list;
    const Json* entry = cluster->get(name);
    if (entry == nullptr) return list;
    if (entry->kind != Json::kArray) RF_THROW(InvalidArgument, "TF_CONFIG's cluster.", name, " is not a list");
    for (const Json& item : entry->items) {
      const size_t colon = item.kind == Json::kString ? item.text.rfind(':') : std::string::npos;
      if (colon == std::string::npos || colon == 0 || colon + 1 == item.text.size()) {
        RF_THROW(InvalidArgument, "TF_CONFIG's cluster.", name, " has an entry that is not \"host:port\"",
                 item.kind == Json::kString ? ": \"" + item.text + "\"" : std::string());
      }
      list.push_back(item.text);
    }
    return list;
  };
  std::vector<std::string> chiefs = tasksOf("chief");
  for (const auto& t : tasksOf("master")) chiefs.push_back(t);
  std::vector<std::string> workers = tasksOf("worker");
  if (chiefs.size() > 1) RF_THROW(InvalidArgument, "TF_CONFIG lists ", chiefs.size(), " chief/master tasks; at most one");
  const std::string& t = type->text;
  if (t == "chief" || t == "master") {
    if (taskIndex != 0 || chiefs.empty()) {
      RF_THROW(InvalidArgument, "TF_CONFIG's task is ", t, " ", taskIndex, ", which the cluster does not list");
    }
    out.rank = 0;
  } else if (t == "worker") {
    if (taskIndex < 0 || taskIndex >= static_cast<int>(workers.size())) {
      RF_THROW(InvalidArgument, "TF_CONFIG's task is worker ", taskIndex, " but the cluster lists ",
               workers.size(), " workers");
    }
    out.rank = static_cast<int>(chiefs.size()) + taskIndex;
  } else {
    RF_THROW(InvalidArgument, "TF_CONFIG's task is a \"", t, "\" task: ringfold's ranks are the chief and "
             "worker tasks (ringfold has no parameter servers, and an evaluator is not a training rank); "
             "run this task without ringfold.init()");
  }
  out.tasks = chiefs;
  out.tasks.insert(out.tasks.end(), workers.begin(), workers.end());
  for (const auto& task : out.tasks) out.cluster += task + ",";
  return out;
}

}  // namespace ringfold::rendezvous::detail
