// Wire constants and helpers shared by TcpStoreServer and TcpStore (internal to rendezvous).
// The protocol itself is described in tcp_store.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringfold::rendezvous::wire {

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;                       // HMAC-SHA256
constexpr size_t kClientHelloBytes = kMacBytes + kNonceBytes;
// What the server sends in place of its proof when the client's proof is wrong, just before it
// closes the connection: kMacBytes zero bytes (an HMAC that is all zeros has probability 2^-256).
inline constexpr uint8_t kRefusal[kMacBytes] = {};
constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxCheckKeys = 65536;
constexpr std::string_view kClientLabel = "ringfold-store-v1";
constexpr std::string_view kServerLabel = "ringfold-store-srv";

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kCancel = 5, kDeletePrefix = 6 };
enum Status : uint8_t { kOk = 0, kError = 1, kCancelled = 2 };

// RINGFOLD_STORE_MAX_VALUE_BYTES, clamped so that it fits a u32 length prefix.
uint32_t maxValueBytes();

// HMAC-SHA256(secret, label || nonce) into out[kMacBytes].
void proof(const std::string& secret, std::string_view label, const uint8_t* nonce, uint8_t* out);
// Constant-time comparison of two MACs.
bool macEqual(const uint8_t* a, const uint8_t* b);
// Cryptographically random bytes; throws Error if the CSPRNG fails.
void randomBytes(uint8_t* out, size_t n);

inline void putU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void putU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void putField(std::vector<uint8_t>& out, const void* data, size_t n) {
  putU32(out, static_cast<uint32_t>(n));
  const auto* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + n);
}
inline uint32_t getU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t getU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace ringfold::rendezvous::wire
