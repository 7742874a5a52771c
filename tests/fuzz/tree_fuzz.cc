// libFuzzer target for what root parses from the job user's agent on the kernel-native path
// (image/mount.h): the tree file, then the plan of an image from it. Each input is tried as it
// is, and repaired into a file whose header, sizes and string lengths agree, so that most inputs
// reach the plan. A tree that plans must be one the kernel may see: its blob extents inside the
// blob, its block numbers within 32 bits, and its metadata written whole when of a size that
// root's bound (image/mount.h) lets through.
#include <fcntl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "image/erofs.h"
#include "image/mount.h"

using namespace fanstore::image;

namespace {

void Try(std::vector<char> bytes) {
  const size_t size = bytes.size();
  auto tree = ParseTree(std::move(bytes));
  if (!tree.ok()) return;
  const uint64_t nodes = (*tree)->size();
  auto img = ErofsImage::PlanSorted(*tree, {});
  if (!img.ok()) return;
  for (uint32_t i = 0; i < nodes; i++) {
    const uint64_t off = img->BlobOffset(i);
    if (off != kNone && off >= img->blob_size()) __builtin_trap();
  }
  // Block numbers are 32-bit in the image; the metadata is written whole (to /dev/null).
  if ((img->blob_size() / img->BlockSize()) >= kNone ||
      (img->meta_size() / img->BlockSize()) >= kNone)
    __builtin_trap();
  if (img->meta_size() <= (uint64_t{64} << 20) + 24 * size) {
    static const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (!img->WriteMeta(null).ok()) __builtin_trap();
  }
}

// The header made to agree with the input's size, and the records' name and target lengths
// with the strings that follow.
std::vector<char> Repaired(const uint8_t* data, size_t size) {
  std::vector<char> b(data, data + size);
  std::memcpy(b.data(), "FSTREE01", 8);
  uint32_t nodes, order;
  std::memcpy(&nodes, data + 8, 4);
  std::memcpy(&order, data + 12, 4);
  nodes = static_cast<uint32_t>(std::min<size_t>(nodes, (size - 32) / 32));
  size_t left = size - 32 - size_t{nodes} * 32;
  order = static_cast<uint32_t>(std::min<size_t>(order, left / 4));
  uint64_t strings = left - size_t{order} * 4;
  std::memcpy(b.data() + 8, &nodes, 4);
  std::memcpy(b.data() + 12, &order, 4);
  std::memcpy(b.data() + 16, &strings, 8);
  for (uint32_t i = 0; i < nodes; i++) {
    char* rec = b.data() + 32 + size_t{i} * 32;
    for (int k : {28, 30}) {
      uint16_t len;
      std::memcpy(&len, rec + k, 2);
      len = static_cast<uint16_t>(std::min<uint64_t>(len, strings));
      if (i + 1 == nodes && k == 30)
        len = static_cast<uint16_t>(std::min<uint64_t>(strings, 0xffff));
      strings -= len;
      std::memcpy(rec + k, &len, 2);
    }
  }
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Try(std::vector<char>(data, data + size));
  if (size >= 32) Try(Repaired(data, size));
  return 0;
}
