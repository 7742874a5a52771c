// XXH3 compiled with -mavx2 (see hash.cc, which calls these only when the CPU has AVX2).
// Nothing else belongs in this file: any inline function it instantiated could be picked by
// the linker for the whole program and run on a CPU without AVX2.
#include <cstddef>
#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace fanstore::detail {

uint64_t Xxh3Avx2(const void* data, size_t len) { return XXH3_64bits(data, len); }
void Xxh3UpdateAvx2(XXH3_state_t* state, const void* data, size_t len) {
  XXH3_64bits_update(state, data, len);
}

}  // namespace fanstore::detail
