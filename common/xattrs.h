// Extended attributes as a dataset carries them: one encoded list per entry, the same bytes in
// a shard's index (format version 3), the manifest (the root, as hex) and the metadata table.
//
// Encoding: records one after another, names strictly increasing (so unique):
//   u8 name_len | u32le value_len | name | value
// Only the "user." namespace is carried: security.*, trusted.* and system.* attributes are the
// node's policy (labels, capabilities, ACLs), not the dataset's data, and a hostile dataset
// must not bring them (docs/format.md).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fanstore::xattrs {

inline constexpr char kPrefix[] = "user.";
inline constexpr size_t kMaxName = 255;          // XATTR_NAME_MAX
inline constexpr size_t kMaxValue = 65536;       // XATTR_SIZE_MAX
inline constexpr size_t kMaxList = 65536;        // XATTR_LIST_MAX: the names, NUL-terminated
inline constexpr size_t kMaxEncoded = 1u << 20;  // one entry's encoded list

// True for a name this format carries: "user." and at least one more byte, within kMaxName,
// no NUL.
bool Carried(std::string_view name);

// Encodes (name, value) pairs, sorted by name (of a name given twice, the first). The caller
// passes only carried names.
std::string Encode(std::vector<std::pair<std::string, std::string>> attrs);

// Checks an encoded list from an untrusted source; on failure says why in *why.
bool Valid(std::string_view enc, std::string* why);

// getxattr(2) on a valid encoded list: the value's length, or -ENODATA, or -ERANGE when `size`
// is not 0 and too small.
ssize_t Get(std::string_view enc, const char* name, void* value, size_t size);
// listxattr(2): the names, each NUL-terminated; -ERANGE when `size` is not 0 and too small.
ssize_t List(std::string_view enc, char* list, size_t size);

// Every (name, value) of a valid encoded list, in order.
std::vector<std::pair<std::string_view, std::string_view>> Decode(std::string_view enc);

// The carried attributes of the file at `path` (not following a final symlink), encoded; ""
// when it has none or its file system has none (ENOTSUP). Fails with errno otherwise.
int ReadFromFile(const std::string& path, std::string* enc);
// The same of the open file `fd`.
int ReadFromFd(int fd, std::string* enc);

}  // namespace fanstore::xattrs
