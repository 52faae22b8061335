#include "rendezvous/tcp_store_request.h"

#include "rendezvous/tcp_store_protocol.h"

namespace ringfold::rendezvous {
namespace {

class RequestParser {
 public:
  RequestParser(const uint8_t* p, size_t n, uint32_t maxValue) : p_(p), n_(n), maxValue_(maxValue) {}

  Parse parse(Request& req, size_t& used, std::string& why) {
    if (n_ < 1) return Parse::kIncomplete;
    req.op = p_[0];
    pos_ = 1;
    Parse r = Parse::kDone;
    switch (req.op) {
      case wire::kSet:
        if ((r = field(req.key, wire::kMaxKeyBytes, "key", why)) != Parse::kDone) return r;
        if ((r = field(req.value, maxValue_, "value", why)) != Parse::kDone) return r;
        break;
      case wire::kGet:
        if ((r = field(req.key, wire::kMaxKeyBytes, "key", why)) != Parse::kDone) return r;
        break;
      case wire::kAdd:
        if ((r = field(req.key, wire::kMaxKeyBytes, "key", why)) != Parse::kDone) return r;
        if (n_ - pos_ < 8) return Parse::kIncomplete;
        req.delta = static_cast<int64_t>(wire::getU64(p_ + pos_));
        pos_ += 8;
        break;
      case wire::kCheck: {
        if (n_ - pos_ < 4) return Parse::kIncomplete;
        uint32_t count = wire::getU32(p_ + pos_);
        pos_ += 4;
        if (count > wire::kMaxCheckKeys) {
          why = "CHECK of " + std::to_string(count) + " keys exceeds the limit of " +
                std::to_string(wire::kMaxCheckKeys);
          return Parse::kBad;
        }
        uint64_t total = 0;
        req.keys.assign(count, std::string());
        for (uint32_t i = 0; i < count; ++i) {
          if ((r = field(req.keys[i], wire::kMaxKeyBytes, "key", why)) != Parse::kDone) return r;
          total += req.keys[i].size();
          if (total > maxValue_) {
            why = "CHECK keys exceed " + std::to_string(maxValue_) + " bytes in total";
            return Parse::kBad;
          }
        }
        break;
      }
      case wire::kCancel:
        break;
      case wire::kDeletePrefix:
        if ((r = field(req.key, wire::kMaxKeyBytes, "prefix", why)) != Parse::kDone) return r;
        break;
      default:
        why = "unknown request op " + std::to_string(req.op);
        return Parse::kBad;
    }
    used = pos_;
    return Parse::kDone;
  }

 private:
  template <typename Bytes>
  Parse field(Bytes& out, uint32_t limit, const char* what, std::string& why) {
    if (n_ - pos_ < 4) return Parse::kIncomplete;
    uint32_t len = wire::getU32(p_ + pos_);
    if (len > limit) {
      why = std::string(what) + " length " + std::to_string(len) + " exceeds the limit of " +
            std::to_string(limit) + " bytes";
      return Parse::kBad;
    }
    if (n_ - pos_ - 4 < len) return Parse::kIncomplete;
    out.assign(p_ + pos_ + 4, p_ + pos_ + 4 + len);
    pos_ += 4 + len;
    return Parse::kDone;
  }

  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  uint32_t maxValue_;
};

}  // namespace

Parse parseRequest(const uint8_t* data, size_t size, uint32_t maxValue, Request& req, size_t& used,
                   std::string& why) {
  return RequestParser(data, size, maxValue).parse(req, used, why);
}

}  // namespace ringfold::rendezvous
