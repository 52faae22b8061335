// Fuzz target: the engine's negotiation messages (engine/message.h), which every rank decodes
// from its peers (RequestList at the coordinator, ResponseList everywhere).
//
// Checks: decode either returns or throws InvalidArgument; what it returns encodes to bytes
// that decode again to the same encoding (so nothing is lost or invented in a round trip); and
// the first byte picks requests or responses, so both decoders see every input shape.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/message.h"
#include "fuzz_support.h"

namespace en = ringfold::engine;
namespace fz = ringfold::fuzz;

namespace {

template <typename List>
void roundTrip(const uint8_t* data, size_t size, List (*decode)(const uint8_t*, size_t)) {
  List list;
  if (!fz::acceptsOrRejects("engine_messages_fuzz", [&] { list = decode(data, size); })) return;
  const std::vector<uint8_t> once = en::encode(list);
  const std::vector<uint8_t> twice = en::encode(decode(once.data(), once.size()));
  if (once != twice) fz::fail("engine_messages_fuzz", "a decoded message does not survive a round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) {
    roundTrip<en::ResponseList>(data + 1, size - 1, en::decodeResponses);
  } else {
    roundTrip<en::RequestList>(data + 1, size - 1, en::decodeRequests);
  }
  return 0;
}
