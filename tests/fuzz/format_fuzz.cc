// libFuzzer target for everything that parses untrusted dataset bytes: the shard footer, the
// stored (compressed) index, the raw index and the manifest. Any crash, leak or sanitizer
// report is a bug; parse errors are expected.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "stagein/format.h"
#include "stagein/manifest.h"

using namespace fanstore::format;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // 1. As a whole shard: footer at the end, then the index it points to.
  if (size >= kFooterSize) {
    Footer f;
    if (DecodeFooter(in.substr(size - kFooterSize), size, &f).ok()) {
      auto idx = DecodeIndex(in.substr(f.index_offset, f.index_stored_len), f);
      (void)idx;
    }
    Header h;
    (void)DecodeHeader(in, &h);
  }
  // 2. As a raw index, with the entry count taken from the first bytes.
  if (size >= 4) {
    uint32_t count = data[0] | (data[1] << 8);
    auto r = ParseIndexRaw(in.substr(4), size, count);
    (void)r;
  }
  // 3. As a manifest.
  auto m = ManifestFromJson(std::string(in));
  (void)m;
  return 0;
}
