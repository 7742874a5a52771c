// XXH3-64 helpers shared by the format, the agent and the interceptor.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FANSTORE_HASH_AVX2 1
#else
#define FANSTORE_HASH_AVX2 0
#endif

namespace fanstore {
namespace detail {
// Long inputs: XXH3 with AVX2 when the CPU has it (hash.cc).
uint64_t Xxh3Long(const void* data, size_t len);
void Xxh3Update(XXH3_state_t* state, const void* data, size_t len);
inline constexpr size_t kXxh3LongInput = 1024;
}  // namespace detail

inline uint64_t Xxh3(const void* data, size_t len) {
  return len >= detail::kXxh3LongInput ? detail::Xxh3Long(data, len) : XXH3_64bits(data, len);
}
inline uint64_t Xxh3(std::string_view s) { return Xxh3(s.data(), s.size()); }

inline std::string HashHex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Streaming XXH3-64 (for whole shard files).
class Xxh3Stream {
 public:
  Xxh3Stream() { XXH3_64bits_reset(&state_); }
  void Update(const void* data, size_t len) { detail::Xxh3Update(&state_, data, len); }
  uint64_t Digest() const { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

}  // namespace fanstore
