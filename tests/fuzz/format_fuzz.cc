// libFuzzer target for everything that parses untrusted dataset bytes: the shard footer, the
// stored (compressed) index, the raw index fed in pieces, frames whose index entry claims any
// size (decoded whole and as a stream), symlink chains and the manifest. Any crash, leak or
// sanitizer report is a bug; parse errors are expected. Run with -rss_limit_mb=512: hostile
// sizes (a footer claiming a 2 GiB index, a frame claiming a terabyte, a 10-million-value
// manifest) must never be allocated.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/format.h"
#include "format/manifest.h"
#include "format/shard.h"

using namespace fanstore;
using namespace fanstore::format;

namespace {

uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

// One descriptor for the whole run: StreamFrame reads frames with pread.
int FrameFd() {
  static int fd = ::memfd_create("format_fuzz", MFD_CLOEXEC);
  return fd;
}

}  // namespace

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
  // 2. As a raw index, with the entry count taken from the first bytes, whole and in pieces
  // whose sizes come from the input (entries split across pieces).
  if (size >= 4) {
    uint32_t count = data[0] | (data[1] << 8);
    auto r = ParseIndexRaw(in.substr(4), size, count);
    (void)r;
    IndexParser p(size, count);
    const size_t step = 1 + data[2] % 61;
    bool ok = true;
    for (size_t off = 4; ok && off < size; off += step) ok = p.Feed(in.substr(off, step)).ok();
    if (ok) (void)p.Finish();
  }
  // 3. As a frame, for an entry whose size (any, up to the format's terabyte) and codec come
  // from the first 9 bytes: decoded whole, then as a stream.
  if (size >= 9) {
    IndexEntry e;
    e.path = "f";
    e.size = Get64(data) % (kMaxFileSize + 1);
    e.codec = data[8] & 1 ? Codec::kZstd : Codec::kRaw;
    e.offset = 9;
    e.stored_len = size - 9;
    if (e.codec == Codec::kRaw) e.size = e.stored_len;
    FrameDecoder dec;
    std::string_view raw;
    (void)dec.Decode(e, in.substr(9), nullptr, &raw);
    const int fd = FrameFd();
    if (fd >= 0 && ::ftruncate(fd, 0) == 0 &&
        ::pwrite(fd, data, size, 0) == static_cast<ssize_t>(size)) {
      uint64_t got = 0;
      (void)StreamFrame(fd, "fuzz", e, nullptr, [&](std::string_view piece) {
        got += piece.size();
        return Status::OK();
      });
    }
  }
  // 4. As a namespace of symlinks: "a" a directory, "a/l<i>" links whose targets are the
  // input's NUL-separated strings.
  if (size >= 1 && size <= 4096) {
    std::vector<std::string> targets;
    size_t start = 0;
    while (start < size && targets.size() < 8) {
      size_t end = in.find('\0', start);
      if (end == std::string_view::npos) end = size;
      targets.emplace_back(in.substr(start, end - start));
      start = end + 1;
    }
    const LookupFn ns = [&](const std::string& p, std::string* t) {
      if (p == "a") return NodeKind::kDir;
      if (p.size() == 4 && p.compare(0, 3, "a/l") == 0 &&
          static_cast<size_t>(p[3] - '0') < targets.size()) {
        *t = targets[p[3] - '0'];
        return NodeKind::kLink;
      }
      return NodeKind::kOther;
    };
    for (size_t i = 0; i < targets.size(); i++)
      (void)LinkStaysInside("a/l" + std::to_string(i), targets[i], ns);
  }
  // 5. As a manifest.
  auto m = ManifestFromJson(std::string(in));
  (void)m;
  return 0;
}
