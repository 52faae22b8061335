// RF_ASAN_BUILD: defined (as 1) when this translation unit is built with AddressSanitizer, by
// GCC (__SANITIZE_ADDRESS__) or Clang (__has_feature(address_sanitizer)), for the tests that
// must act differently under it.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define RF_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RF_ASAN_BUILD 1
#endif
#endif
