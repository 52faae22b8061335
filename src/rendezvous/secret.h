// Job secrets for the rendezvous store.
//
// generateSecret() returns 32 bytes from OpenSSL's CSPRNG (RAND_bytes), hex-encoded: 64
// characters [0-9a-f]. ringfoldrun creates one per job and hands it to every rank as
// RINGFOLD_SECRET; the store uses the string's bytes as given as the HMAC key, so any
// non-empty text works as a secret too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringfold::rendezvous {

std::string generateSecret();
// Lower-case hex of `n` bytes (2n characters): secrets and derived secrets.
std::string toHex(const uint8_t* bytes, size_t n);
// Its inverse: the bytes that hex `text` (either case) spells; throws InvalidArgument if it is
// not hex of whole bytes.
std::string fromHex(const std::string& text);

}  // namespace ringfold::rendezvous
