// Run-time choice of XXH3's vector code for long inputs. The package's headers are compiled
// for the baseline x86-64 (SSE2); hash_avx2.cc compiles the same code with AVX2, which hashes
// about 2.4 times as fast on a CPU that has it (shard and file checks, V1 and S1 in
// docs/benchmarks.md). Short inputs (paths) use scalar code either way and stay inline.
#include "common/hash.h"

namespace fanstore::detail {

#if FANSTORE_HASH_AVX2
uint64_t Xxh3Avx2(const void* data, size_t len);
void Xxh3UpdateAvx2(XXH3_state_t* state, const void* data, size_t len);

namespace {
bool HasAvx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}
}  // namespace

uint64_t Xxh3Long(const void* data, size_t len) {
  return HasAvx2() ? Xxh3Avx2(data, len) : XXH3_64bits(data, len);
}

void Xxh3Update(XXH3_state_t* state, const void* data, size_t len) {
  if (HasAvx2())
    Xxh3UpdateAvx2(state, data, len);
  else
    XXH3_64bits_update(state, data, len);
}
#else
uint64_t Xxh3Long(const void* data, size_t len) { return XXH3_64bits(data, len); }
void Xxh3Update(XXH3_state_t* state, const void* data, size_t len) {
  XXH3_64bits_update(state, data, len);
}
#endif

}  // namespace fanstore::detail
