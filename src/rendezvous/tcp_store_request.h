// One TcpStore request, parsed incrementally from the bytes a connection has received so far
// (internal to rendezvous; the wire format is in tcp_store.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringfold::rendezvous {

enum class Parse { kIncomplete, kDone, kBad };

struct Request {
  uint8_t op = 0;
  std::string key;  // DELETE_PREFIX: the prefix
  std::vector<uint8_t> value;
  int64_t delta = 0;
  std::vector<std::string> keys;
};

// Parses the request at the front of [data, data+size). kDone: `req` is filled and `used` is
// its length in bytes. kIncomplete: more bytes are needed. kBad: `why` says what is wrong.
// Every length prefix is checked against its bound (keys wire::kMaxKeyBytes, values and a
// CHECK's keys together `maxValue`) as soon as its 4 bytes are there, before the body has
// arrived, and nothing is allocated from an unchecked length.
Parse parseRequest(const uint8_t* data, size_t size, uint32_t maxValue, Request& req, size_t& used,
                   std::string& why);

}  // namespace ringfold::rendezvous
