// The archive's namespace (see archive_tree.h).
#include "pack/archive_tree.h"

#include "common/hash.h"
#include "pack/core.h"

namespace fanstore::pack {
namespace {

using format::EntryType;

std::string Parent(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? std::string() : p.substr(0, s);
}

}  // namespace

bool MemberPath(const std::string& prefix, const char* name, std::string* out) {
  std::string p = prefix;
  const char* c = name;
  while (*c) {
    const char* e = c;
    while (*e && *e != '/') e++;
    std::string_view comp(c, e - c);
    if (comp == "..") return false;
    if (!comp.empty() && comp != ".") {
      if (!p.empty()) p += '/';
      p.append(comp);
    }
    c = *e ? e + 1 : e;
  }
  *out = std::move(p);
  return true;
}

PathKeySet::PathKeySet() : seed_(RandomNonZero()) {}

PathKey PathKeySet::Key(std::string_view path) const {
  XXH128_hash_t h = XXH3_128bits_withSeed(path.data(), path.size(), seed_);
  return {h.low64, h.high64 | (h.low64 == 0 && h.high64 == 0)};  // (0, 0) marks a free slot
}

bool PathKeySet::Contains(PathKey k) const {
  if (slots_.empty()) return false;
  for (size_t i = k.lo & mask_;; i = (i + 1) & mask_) {
    if (slots_[i] == k) return true;
    if (IsFree(slots_[i])) return false;
  }
}

void PathKeySet::Insert(PathKey k) {
  if (10 * (count_ + 1) > 7 * slots_.size()) Grow();
  if (Place(&slots_, mask_, k)) count_++;
}

bool PathKeySet::Place(std::vector<PathKey>* slots, size_t mask, PathKey k) {
  for (size_t i = k.lo & mask;; i = (i + 1) & mask) {
    PathKey& s = (*slots)[i];
    if (s == k) return false;
    if (IsFree(s)) {
      s = k;
      return true;
    }
  }
}

void PathKeySet::Grow() {
  std::vector<PathKey> bigger(slots_.empty() ? size_t{1} << 16 : 2 * slots_.size(), PathKey{0, 0});
  const size_t mask = bigger.size() - 1;
  for (const PathKey& k : slots_)
    if (!IsFree(k)) Place(&bigger, mask, k);
  slots_.swap(bigger);
  mask_ = mask;
}

Status ArchiveTree::Claim(const std::string& rel, EntryType type, int64_t mtime_ns) {
  auto twice = [&](const std::string& p) {
    return Status::InvalidArgument(p + " appears twice in the archive (as a " +
                                   (type == EntryType::kDir ? "directory" : "file or symlink") +
                                   " too); a dataset stores each path once");
  };
  const PathKey key = files_.Key(rel);
  if (files_.Contains(key) || nonfile_at_.count(rel)) return twice(rel);
  if (type == EntryType::kFile) files_.Insert(key);
  // Archives list a directory's files together: its parents were checked for the file before.
  const size_t slash = rel.rfind('/');
  if (slash != std::string::npos && type == EntryType::kFile &&
      std::string_view(rel).substr(0, slash) == last_dir_)
    return Status::OK();
  for (std::string p = Parent(rel); !p.empty(); p = Parent(p)) {
    auto it = nonfile_at_.find(p);
    if (it != nonfile_at_.end()) {
      if (nonfiles_[it->second].type == EntryType::kDir) break;
      return Status::InvalidArgument(rel + ": its parent " + p + " is a symlink in the archive");
    }
    if (files_.Contains(files_.Key(p)))
      return Status::InvalidArgument(rel + ": its parent " + p + " is a file in the archive");
    AddNonFile({p, EntryType::kDir, 0755, 0, mtime_ns, {}});
  }
  if (type == EntryType::kFile) last_dir_ = Parent(rel);
  return Status::OK();
}

Status ArchiveTree::AddDir(const std::string& rel, uint32_t mode, int64_t mtime_ns) {
  auto it = nonfile_at_.find(rel);
  if (it != nonfile_at_.end() && nonfiles_[it->second].type == EntryType::kDir) {
    nonfiles_[it->second].mode = mode;
    nonfiles_[it->second].mtime_ns = mtime_ns;
    return Status::OK();
  }
  FS_RETURN_IF_ERROR(Claim(rel, EntryType::kDir, mtime_ns));
  AddNonFile({rel, EntryType::kDir, mode, 0, mtime_ns, {}});
  return Status::OK();
}

void ArchiveTree::SetDirAttrs(const std::string& rel, int64_t ctime_ns, std::string xattrs) {
  SrcEntry& dir = nonfiles_[nonfile_at_.at(rel)];
  dir.ctime_ns = ctime_ns;
  dir.xattrs = std::move(xattrs);
}

Status ArchiveTree::AddLink(const std::string& rel, EntryType type, uint32_t mode, int64_t mtime_ns,
                            std::string target) {
  FS_RETURN_IF_ERROR(Claim(rel, type, mtime_ns));
  const uint64_t size = target.size();
  AddNonFile({rel, type, mode, size, mtime_ns, std::move(target)});
  return Status::OK();
}

void ArchiveTree::AddNonFile(SrcEntry e) {
  nonfile_at_.emplace(e.rel, nonfiles_.size());
  nonfiles_.push_back(std::move(e));
}

}  // namespace fanstore::pack
