// Fuzz target: the store server's request parser (rendezvous/tcp_store_request.h), which reads
// whatever an authenticated client sends.
//
// Checks, besides the sanitizers' own: the parser never claims more bytes than it was given;
// a request it accepts parses the same from exactly its own bytes and from every longer input;
// any strict prefix of an accepted request is incomplete (never bad, never done); a rejected
// input says why. Requests are parsed one after another, as the server does on a connection.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "rendezvous/tcp_store_request.h"

namespace rv = ringfold::rendezvous;

namespace {

[[noreturn]] void fail(const char* what) { ringfold::fuzz::fail("store_request_fuzz", what); }

bool same(const rv::Request& a, const rv::Request& b) {
  return a.op == b.op && a.key == b.key && a.value == b.value && a.delta == b.delta && a.keys == b.keys;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A small value limit, so that the limit checks are reached by short inputs too.
  constexpr uint32_t kMaxValue = 256;
  size_t at = 0;
  while (at < size) {
    rv::Request req;
    size_t used = 0;
    std::string why;
    const rv::Parse r = rv::parseRequest(data + at, size - at, kMaxValue, req, used, why);
    if (r == rv::Parse::kBad) {
      if (why.empty()) fail("a rejected request without a reason");
      return 0;
    }
    if (r == rv::Parse::kIncomplete) return 0;
    if (used == 0 || used > size - at) fail("a request of impossible length");
    rv::Request again;
    size_t usedAgain = 0;
    if (rv::parseRequest(data + at, used, kMaxValue, again, usedAgain, why) != rv::Parse::kDone ||
        usedAgain != used || !same(req, again)) {
      fail("a request parses differently from its own bytes");
    }
    for (size_t cut : {size_t{0}, used / 2, used - 1}) {
      rv::Request part;
      size_t partUsed = 0;
      if (cut < used && rv::parseRequest(data + at, cut, kMaxValue, part, partUsed, why) != rv::Parse::kIncomplete) {
        fail("a strict prefix of a request is not incomplete");
      }
    }
    at += used;
  }
  return 0;
}
