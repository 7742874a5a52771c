#include "common/xattrs.h"

#include <errno.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cstring>

#include "common/le.h"

namespace fanstore::xattrs {
namespace {

constexpr size_t kRecordHead = 5;  // u8 name_len, u32 value_len

using le::Get32;

// Calls fn(name, value) for each record of a valid list until fn returns false.
template <typename Fn>
void ForEach(std::string_view enc, Fn fn) {
  size_t at = 0;
  while (at + kRecordHead <= enc.size()) {
    const size_t nlen = static_cast<unsigned char>(enc[at]);
    const size_t vlen = Get32(enc.data() + at + 1);
    const std::string_view name = enc.substr(at + kRecordHead, nlen);
    const std::string_view value = enc.substr(at + kRecordHead + nlen, vlen);
    if (!fn(name, value)) return;
    at += kRecordHead + nlen + vlen;
  }
}

}  // namespace

bool Carried(std::string_view name) {
  const size_t plen = sizeof kPrefix - 1;
  return name.size() > plen && name.size() <= kMaxName && name.compare(0, plen, kPrefix) == 0 &&
         name.find('\0') == std::string_view::npos;
}

std::string Encode(std::vector<std::pair<std::string, std::string>> attrs) {
  std::stable_sort(attrs.begin(), attrs.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  for (size_t i = 0; i < attrs.size(); i++) {
    const auto& [name, value] = attrs[i];
    if (i > 0 && name == attrs[i - 1].first) continue;  // a name given twice: the first
    out.push_back(static_cast<char>(name.size()));
    le::Put32(out, static_cast<uint32_t>(value.size()));
    out += name;
    out += value;
  }
  return out;
}

bool Valid(std::string_view enc, std::string* why) {
  if (enc.size() > kMaxEncoded) {
    *why = "extended attributes of " + std::to_string(enc.size()) + " bytes (at most " +
           std::to_string(kMaxEncoded) + ")";
    return false;
  }
  size_t at = 0, names = 0;
  std::string_view prev;
  while (at < enc.size()) {
    if (enc.size() - at < kRecordHead) {
      *why = "extended attribute record truncated";
      return false;
    }
    const size_t nlen = static_cast<unsigned char>(enc[at]);
    const size_t vlen = Get32(enc.data() + at + 1);
    if (vlen > kMaxValue || enc.size() - at - kRecordHead < nlen + vlen) {
      *why = "extended attribute record runs past its list";
      return false;
    }
    const std::string_view name = enc.substr(at + kRecordHead, nlen);
    if (!Carried(name)) {
      *why = "extended attribute name '" + std::string(name.substr(0, 64)) +
             "' is not in the user namespace";
      return false;
    }
    if (!prev.empty() && name <= prev) {
      *why = "extended attribute names out of order or repeated";
      return false;
    }
    names += nlen + 1;
    if (names > kMaxList) {
      *why = "extended attribute names exceed " + std::to_string(kMaxList) + " bytes";
      return false;
    }
    prev = name;
    at += kRecordHead + nlen + vlen;
  }
  return true;
}

ssize_t Get(std::string_view enc, const char* name, void* value, size_t size) {
  ssize_t r = -ENODATA;
  const std::string_view want(name);
  ForEach(enc, [&](std::string_view n, std::string_view v) {
    if (n != want) return n < want;  // sorted: stop once past it
    if (size != 0 && size < v.size()) {
      r = -ERANGE;
    } else {
      if (size != 0 && !v.empty()) std::memcpy(value, v.data(), v.size());
      r = static_cast<ssize_t>(v.size());
    }
    return false;
  });
  return r;
}

ssize_t List(std::string_view enc, char* list, size_t size) {
  size_t need = 0;
  ForEach(enc, [&](std::string_view n, std::string_view) {
    need += n.size() + 1;
    return true;
  });
  if (size == 0) return static_cast<ssize_t>(need);
  if (size < need) return -ERANGE;
  size_t at = 0;
  ForEach(enc, [&](std::string_view n, std::string_view) {
    std::memcpy(list + at, n.data(), n.size());
    list[at + n.size()] = '\0';
    at += n.size() + 1;
    return true;
  });
  return static_cast<ssize_t>(need);
}

std::vector<std::pair<std::string_view, std::string_view>> Decode(std::string_view enc) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  ForEach(enc, [&](std::string_view n, std::string_view v) {
    out.emplace_back(n, v);
    return true;
  });
  return out;
}

namespace {

// The carried attributes through `list` (listxattr-like) and `get` (getxattr-like), encoded.
template <typename List, typename Get>
int ReadWith(List&& list, Get&& get, std::string* enc) {
  enc->clear();
  std::string names(256, '\0');
  ssize_t n;
  for (;;) {
    n = list(names.data(), names.size());
    if (n >= 0) break;
    if (errno == ENOTSUP) return 0;
    if (errno != ERANGE) return errno;
    const ssize_t want = list(nullptr, 0);
    if (want < 0) return errno;
    names.resize(static_cast<size_t>(want) + 1);
  }
  if (n == 0) return 0;
  names.resize(static_cast<size_t>(n));
  std::vector<std::pair<std::string, std::string>> attrs;
  for (size_t at = 0; at < names.size();) {
    const size_t end = names.find('\0', at);
    std::string name = names.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? names.size() : end + 1;
    if (!Carried(name)) continue;
    std::string value(64, '\0');
    bool gone = false;
    for (;;) {
      const ssize_t v = get(name.c_str(), value.data(), value.size());
      if (v >= 0) {
        value.resize(static_cast<size_t>(v));
        break;
      }
      if (errno == ENODATA) {  // removed meanwhile: not carried
        gone = true;
        break;
      }
      if (errno != ERANGE) return errno;
      const ssize_t want = get(name.c_str(), nullptr, 0);
      if (want < 0) return errno;
      value.resize(static_cast<size_t>(want) + 1);
    }
    if (gone) continue;
    attrs.emplace_back(std::move(name), std::move(value));
  }
  *enc = Encode(std::move(attrs));
  return 0;
}

}  // namespace

int ReadFromFile(const std::string& path, std::string* enc) {
  const char* p = path.c_str();
  return ReadWith(
      [p](char* list, size_t size) { return ::llistxattr(p, list, size); },
      [p](const char* name, void* value, size_t size) { return ::lgetxattr(p, name, value, size); },
      enc);
}

int ReadFromFd(int fd, std::string* enc) {
  return ReadWith([fd](char* list, size_t size) { return ::flistxattr(fd, list, size); },
                  [fd](const char* name, void* value, size_t size) {
                    return ::fgetxattr(fd, name, value, size);
                  },
                  enc);
}

}  // namespace fanstore::xattrs
