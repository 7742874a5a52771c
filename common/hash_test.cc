// The dispatched XXH3 (AVX2 where the CPU has it) gives the same values as the reference.
#include "common/hash.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace fanstore {
namespace {

TEST(Hash, LongInputsMatchTheReference) {
  std::vector<unsigned char> buf(3 << 20);
  std::mt19937_64 rng(7);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t len : {size_t{0}, size_t{1}, size_t{240}, size_t{1023}, size_t{1024}, size_t{1025},
                     size_t{4096}, size_t{65537}, buf.size()}) {
    uint64_t ref = XXH3_64bits(buf.data(), len);
    EXPECT_EQ(Xxh3(buf.data(), len), ref) << len;
    // Streaming in uneven pieces gives the one-shot value.
    Xxh3Stream s;
    for (size_t off = 0, step = 1; off < len; off += step, step = step * 3 + 1)
      s.Update(buf.data() + off, std::min(step, len - off));
    EXPECT_EQ(s.Digest(), ref) << len;
  }
  // A known value: XXH3-64 of the empty input.
  EXPECT_EQ(Xxh3("", 0), 0x2d06800538d394c2ULL);
}

}  // namespace
}  // namespace fanstore
