#include "common/mountinfo.h"

#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "common/io.h"
#include "common/text.h"

namespace fanstore {
namespace {

constexpr size_t kMaxMountInfo = 16 << 20;

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::vector<MountEntry> ParseMountInfo(const std::string& text) {
  std::vector<MountEntry> out;
  for (std::string_view line : Split(text, '\n')) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS
    const std::vector<std::string_view> f = Split(line, ' ');
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") dash++;
    if (f.size() < 7 || dash + 2 >= f.size()) continue;
    const size_t colon = f[2].find(':');
    if (colon == std::string_view::npos) continue;
    const auto id = ParseInt(f[0], 0, INT32_MAX), parent = ParseInt(f[1], 0, INT32_MAX);
    const auto major = ParseInt(f[2].substr(0, colon), 0, UINT32_MAX);
    const auto minor = ParseInt(f[2].substr(colon + 1), 0, UINT32_MAX);
    if (!id || !parent || !major || !minor) continue;
    MountEntry e;
    e.id = static_cast<int>(*id);
    e.parent = static_cast<int>(*parent);
    e.dev = makedev(static_cast<unsigned>(*major), static_cast<unsigned>(*minor));
    e.mount_point = Unescape(f[4]);
    e.options = std::string(f[5]);
    e.type = Unescape(f[dash + 1]);
    e.source = Unescape(f[dash + 2]);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<MountEntry> MountsAt(const std::string& path) {
  std::vector<MountEntry> at;
  auto text = ReadSmallFile("/proc/self/mountinfo", kMaxMountInfo);
  if (!text.ok()) return at;
  for (MountEntry& e : ParseMountInfo(text.value()))
    if (e.mount_point == path) at.push_back(std::move(e));
  return at;
}

int DetachMountsBelow(const std::string& dir, const std::string& type) {
  auto text = ReadSmallFile("/proc/self/mountinfo", kMaxMountInfo);
  if (!text.ok() || dir.empty()) return 0;
  const std::string prefix = dir.back() == '/' ? dir : dir + "/";
  std::vector<std::string> points;
  for (const MountEntry& e : ParseMountInfo(text.value()))
    if (e.type == type && e.mount_point.compare(0, prefix.size(), prefix) == 0)
      points.push_back(e.mount_point);
  std::sort(points.begin(), points.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  int n = 0;
  for (const std::string& p : points) n += ::umount2(p.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0;
  return n;
}

std::vector<MountCopy> MountsElsewhere(dev_t dev) {
  std::vector<MountCopy> found;
  struct stat self;
  if (::stat("/proc/self/ns/mnt", &self) != 0) return found;
  std::set<ino_t> seen = {self.st_ino};
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (struct dirent* d = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(ParseInt(d->d_name, 1, INT32_MAX).value_or(0));
    if (pid == 0) continue;
    const std::string dir = std::string("/proc/") + d->d_name;
    struct stat ns;
    if (::stat((dir + "/ns/mnt").c_str(), &ns) != 0 || !seen.insert(ns.st_ino).second) continue;
    auto text = ReadSmallFile(dir + "/mountinfo", kMaxMountInfo);
    if (!text.ok()) continue;
    for (const MountEntry& e : ParseMountInfo(text.value()))
      if (e.dev == dev) found.push_back({pid, e.mount_point});
  }
  ::closedir(proc);
  return found;
}

}  // namespace fanstore
