// The source tree's walk and reads (see walk.h).
#include "pack/walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>

#include "common/io.h"
#include "common/path.h"
#include "common/xattrs.h"

namespace fanstore::pack {
namespace {

using format::EntryType;

int64_t Ns(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}
int64_t MtimeNs(const struct stat& st) { return Ns(st.st_mtim); }

Status CheckXattrs(int err, const std::string& path, const std::string& enc) {
  if (err) return Status::FromErrno("cannot read extended attributes of " + path, err);
  std::string why;
  if (!xattrs::Valid(enc, &why)) return Status::InvalidArgument(path + ": " + why);
  return Status::OK();
}

// The carried extended attributes of the directory `path`, encoded.
Status ReadXattrs(const std::string& path, std::string* enc) {
  return CheckXattrs(xattrs::ReadFromFile(path, enc), path, *enc);
}

class Walker {
 public:
  Walker(std::string root, const Options& o) : root_(std::move(root)), opts_(o) {}

  // The entries into out->entries, the top directory's attributes into out's root fields.
  Status Run(SourceTree* tree) {
    std::vector<SrcEntry>* out = &tree->entries;
    char* real = ::realpath(root_.c_str(), nullptr);
    if (!real) return Status::FromErrno("source " + root_, errno);
    real_root_ = real;
    free(real);
    struct stat st;
    if (::stat(root_.c_str(), &st) != 0) return Status::FromErrno("source " + root_, errno);
    if (!S_ISDIR(st.st_mode))
      return Status::InvalidArgument("source " + root_ + " is not a directory");
    tree->root_mode = st.st_mode & 07777;
    tree->root_mtime_ns = MtimeNs(st);
    tree->root_ctime_ns = Ns(st.st_ctim);
    tree->root_size = static_cast<uint64_t>(st.st_size);
    FS_RETURN_IF_ERROR(ReadXattrs(root_, &tree->root_xattrs));
    FS_RETURN_IF_ERROR(Dir("", out));
    skipped_ += DropEscapingLinks(root_, out, opts_.warn);
    return Status::OK();
  }
  uint64_t skipped() const { return skipped_; }

 private:
  void Warn(const std::string& msg) {
    skipped_++;
    if (opts_.warn) opts_.warn(msg);
  }

  Status Dir(const std::string& rel, std::vector<SrcEntry>* out) {
    const std::string path = Join(root_, rel);
    DIR* d = ::opendir(path.c_str());
    if (!d) return Status::FromErrno("cannot read directory " + path, errno);
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* de = ::readdir(d)) {
      if (std::strcmp(de->d_name, ".") && std::strcmp(de->d_name, ".."))
        names.emplace_back(de->d_name);
    }
    int err = errno;
    ::closedir(d);
    if (err) return Status::FromErrno("cannot read directory " + path, err);
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      if (opts_.cancel && opts_.cancel->load()) return Status::Aborted("interrupted");
      const std::string crel = Join(rel, name);
      const std::string cpath = Join(root_, crel);
      struct stat st;
      if (::lstat(cpath.c_str(), &st) != 0) {
        if (errno == ENOENT) return Status::IOError(cpath + " vanished while packing");
        return Status::FromErrno("cannot stat " + cpath, errno);
      }
      if (!format::IsSafePath(crel)) {
        Warn("skipping " + cpath + ": name is too long");
        continue;
      }
      SrcEntry e{crel,
                 EntryType::kFile,
                 static_cast<uint32_t>(st.st_mode & 07777),
                 static_cast<uint64_t>(st.st_size),
                 MtimeNs(st),
                 {},
                 Ns(st.st_ctim),
                 {}};
      if (S_ISREG(st.st_mode)) {
        // A file with several names in the tree: its first name in walk order holds the data,
        // the others are hard links to it.
        if (st.st_nlink > 1) {
          auto [it, first] = names_of_.try_emplace({st.st_dev, st.st_ino}, crel);
          if (!first) {
            e.type = EntryType::kHardLink;
            e.target = it->second;
            e.size = e.target.size();
          }
        }
        // A file's extended attributes are read with its bytes, through its descriptor, on the
        // workers (ReadWhole): one path lookup less per file on this one thread.
        out->push_back(std::move(e));
      } else if (S_ISDIR(st.st_mode)) {
        e.type = EntryType::kDir;
        FS_RETURN_IF_ERROR(ReadXattrs(cpath, &e.xattrs));
        out->push_back(std::move(e));
        FS_RETURN_IF_ERROR(Dir(crel, out));
      } else if (S_ISLNK(st.st_mode)) {
        FS_RETURN_IF_ERROR(Link(cpath, std::move(e), out));
      } else {
        const char* kind = S_ISSOCK(st.st_mode)   ? "socket"
                           : S_ISFIFO(st.st_mode) ? "FIFO"
                                                  : "device";
        Warn(std::string("skipping ") + kind + " " + cpath + ": not stored in a dataset");
      }
    }
    return Status::OK();
  }

  Status Link(const std::string& cpath, SrcEntry e, std::vector<SrcEntry>* out) {
    char buf[format::kMaxPath + 1];
    ssize_t n = ::readlink(cpath.c_str(), buf, sizeof buf);
    if (n < 0) return Status::FromErrno("cannot read symlink " + cpath, errno);
    if (n == 0 || static_cast<size_t>(n) > format::kMaxPath) {
      Warn("skipping symlink " + cpath + ": target too long");
      return Status::OK();
    }
    std::string target(buf, n);
    if (target.front() == '/') {
      // An absolute target inside the source tree becomes relative, so it resolves in the mount.
      if (target.compare(0, real_root_.size() + 1, real_root_ + "/") != 0) {
        Warn("skipping symlink " + cpath + " -> " + target + ": points outside the dataset");
        return Status::OK();
      }
      std::string rel_target = target.substr(real_root_.size() + 1);
      std::string up;
      for (char c : e.rel)
        if (c == '/') up += "../";
      target = up + rel_target;
    }
    if (!format::IsContainedLink(e.rel, target)) {
      Warn("skipping symlink " + cpath + " -> " + target + ": points outside the dataset");
      return Status::OK();
    }
    e.type = EntryType::kSymlink;
    e.mode = 0777;
    e.size = target.size();
    e.target = std::move(target);
    out->push_back(std::move(e));
    return Status::OK();
  }

  std::string root_, real_root_;
  std::map<std::pair<dev_t, ino_t>, std::string> names_of_;  // files with several names
  const Options& opts_;
  uint64_t skipped_ = 0;
};

}  // namespace

Status WalkSource(const std::string& root, const Options& opts, SourceTree* out) {
  Walker w(root, opts);
  FS_RETURN_IF_ERROR(w.Run(out));
  out->skipped = w.skipped();
  return Status::OK();
}

uint64_t DropEscapingLinks(const std::string& root, std::vector<SrcEntry>* entries,
                           const std::function<void(const std::string&)>& warn) {
  std::unordered_map<std::string_view, size_t> at;
  bool any = false;
  for (size_t i = 0; i < entries->size(); i++) {
    at.emplace((*entries)[i].rel, i);
    any |= (*entries)[i].type == EntryType::kSymlink;
  }
  if (!any) return 0;
  std::vector<bool> drop(entries->size(), false);
  const format::LookupFn lookup = [&](const std::string& p, std::string* target) {
    auto it = at.find(p);
    if (it == at.end() || drop[it->second]) return format::NodeKind::kOther;
    const SrcEntry& e = (*entries)[it->second];
    if (e.type == EntryType::kDir) return format::NodeKind::kDir;
    if (e.type != EntryType::kSymlink) return format::NodeKind::kOther;
    *target = e.target;
    return format::NodeKind::kLink;
  };
  uint64_t dropped = 0;
  for (size_t i = 0; i < entries->size(); i++) {
    const SrcEntry& e = (*entries)[i];
    if (e.type != EntryType::kSymlink || format::LinkStaysInside(e.rel, e.target, lookup)) continue;
    if (warn)
      warn("skipping symlink " + Join(root, e.rel) + " -> " + e.target +
           ": points outside the dataset through other symlinks");
    drop[i] = true;
    dropped++;
  }
  size_t k = 0;
  for (size_t i = 0; i < entries->size(); i++)
    if (!drop[i]) {
      if (k != i) (*entries)[k] = std::move((*entries)[i]);
      k++;
    }
  entries->resize(k);
  return dropped;
}

std::string Join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return b.empty() ? a : a + "/" + b;
}

Result<UniqueFD> OpenSource(const std::string& path, const SrcEntry& e) {
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return Status::IOError(path + " vanished while packing");
    return Status::FromErrno("cannot read " + path, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != e.size)
    return Status::IOError(path + " changed while packing (size " + std::to_string(e.size) +
                           " became " + std::to_string(st.st_size) + ")");
  return fd;
}

Status ReadXattrs(int fd, const std::string& path, std::string* enc) {
  return CheckXattrs(xattrs::ReadFromFd(fd, enc), path, *enc);
}

Status ReadWhole(const std::string& path, const SrcEntry& e, std::string* out,
                 std::string* xattrs) {
  auto fd = OpenSource(path, e);
  if (!fd.ok()) return fd.status();
  if (xattrs) FS_RETURN_IF_ERROR(ReadXattrs(fd->get(), path, xattrs));
  out->resize(e.size);
  return PreadFull(fd->get(), out->data(), e.size, 0, path);
}

}  // namespace fanstore::pack
