#include "rendezvous/secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "common/params.h"
#include "rendezvous/tcp_store_protocol.h"

namespace ringfold::rendezvous {

std::string toHex(const uint8_t* bytes, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

std::string fromHex(const std::string& text) {
  auto digit = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    RF_THROW(InvalidArgument, "'", text, "' is not hex");
  };
  if (text.size() % 2 != 0) RF_THROW(InvalidArgument, "'", text, "' is not hex of whole bytes (odd length)");
  std::string out;
  out.reserve(text.size() / 2);
  for (size_t i = 0; i < text.size(); i += 2) out += static_cast<char>(digit(text[i]) * 16 + digit(text[i + 1]));
  return out;
}

std::string generateSecret() {
  uint8_t raw[32];
  wire::randomBytes(raw, sizeof raw);
  return toHex(raw, sizeof raw);
}

namespace wire {

uint32_t maxValueBytes() {
  uint64_t v = params::kStoreMaxValueBytes.asBytes();
  return static_cast<uint32_t>(std::min<uint64_t>(v, std::numeric_limits<uint32_t>::max() - 64));
}

void proof(const std::string& secret, std::string_view label, const uint8_t* nonce, uint8_t* out) {
  uint8_t msg[64 + kNonceBytes];
  RF_ENFORCE(label.size() <= 64, "label too long");
  std::copy(label.begin(), label.end(), msg);
  std::copy(nonce, nonce + kNonceBytes, msg + label.size());
  unsigned int len = 0;
  const unsigned char* r = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg,
                                label.size() + kNonceBytes, out, &len);
  RF_ENFORCE(r != nullptr && len == kMacBytes, "HMAC-SHA256 failed in OpenSSL");
}

bool macEqual(const uint8_t* a, const uint8_t* b) { return CRYPTO_memcmp(a, b, kMacBytes) == 0; }

void randomBytes(uint8_t* out, size_t n) {
  RF_ENFORCE(RAND_bytes(out, static_cast<int>(n)) == 1,
             "OpenSSL RAND_bytes failed: no secure random source");
}

}  // namespace wire
}  // namespace ringfold::rendezvous
