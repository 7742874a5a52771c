// XXH3-64 helpers shared by the format, the agent and the interceptor.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fanstore {

inline uint64_t Xxh3(const void* data, size_t len) { return XXH3_64bits(data, len); }
inline uint64_t Xxh3(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

inline std::string HashHex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Streaming XXH3-64 (for whole shard files).
class Xxh3Stream {
 public:
  Xxh3Stream() { XXH3_64bits_reset(&state_); }
  void Update(const void* data, size_t len) { XXH3_64bits_update(&state_, data, len); }
  uint64_t Digest() const { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

}  // namespace fanstore
