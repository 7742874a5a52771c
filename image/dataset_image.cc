#include "image/dataset_image.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "common/io.h"

namespace fanstore::image {
namespace {

uint32_t TypeBits(format::EntryType t) {
  switch (t) {
    case format::EntryType::kDir:
      return S_IFDIR;
    case format::EntryType::kSymlink:
      return S_IFLNK;
    default:
      return S_IFREG;
  }
}

Result<UniqueFD> Create(int dir, const char* name) {
  UniqueFD fd(::openat(dir, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno(std::string("create ") + name, errno);
  return fd;
}

}  // namespace

Result<DatasetTree> TreeOf(const format::Dataset& ds) {
  DatasetTree t;
  t.entries = ds.SortedEntries();
  const auto& m = ds.manifest();
  t.nodes.reserve(t.entries.size() + 1);
  Node root;
  root.mode = S_IFDIR | (m.root_mode & 07777);
  root.mtime_ns = m.root_mtime_ns;
  t.nodes.push_back(root);
  std::unordered_map<std::string_view, uint32_t> node_of;  // by path (directories and files)
  node_of.reserve(t.entries.size());
  format::FrameDecoder dec(&ds.dict());
  std::vector<std::pair<uint32_t, std::string_view>> links;  // hard links: node, target path
  for (const format::IndexEntry* e : t.entries) {
    const uint32_t id = static_cast<uint32_t>(t.nodes.size());
    const size_t slash = e->path.rfind('/');
    Node n;
    n.name = slash == std::string::npos ? std::string_view(e->path)
                                        : std::string_view(e->path).substr(slash + 1);
    if (slash != std::string::npos) {
      auto it = node_of.find(std::string_view(e->path).substr(0, slash));
      if (it == node_of.end())
        return Status::Corruption("erofs image: " + e->path + ": no parent directory");
      n.parent = it->second;
    }
    n.mode = TypeBits(e->type) | (e->mode & 07777);
    n.size = e->size;
    n.mtime_ns = e->mtime_ns;
    if (e->type == format::EntryType::kSymlink || e->type == format::EntryType::kHardLink) {
      format::Dataset::Ref ref;
      ds.Find(e->path, &ref);
      std::string target;
      FS_RETURN_IF_ERROR(format::ReadEntry(ds.shard(ref.shard), *e, &dec, &target));
      std::string_view kept = t.targets.emplace_back(std::move(target));
      if (e->type == format::EntryType::kSymlink)
        n.target = kept;
      else
        links.emplace_back(id, kept);
    }
    node_of.emplace(e->path, id);
    t.nodes.push_back(n);
  }
  for (const auto& [id, target] : links) {
    auto it = node_of.find(target);
    if (it == node_of.end())
      return Status::Corruption("erofs image: a hard link to a missing file");
    t.nodes[id].link = it->second;
    t.nodes[id].size = 0;
  }
  return t;
}

Status WriteDatasetImage(const format::Dataset& ds, const std::string& dest,
                         const WriteOptions& opts) {
  auto tree = TreeOf(ds);
  if (!tree.ok()) return tree.status();
  std::unordered_map<const format::IndexEntry*, uint32_t> node_of;
  node_of.reserve(tree->entries.size());
  for (size_t i = 0; i < tree->entries.size(); i++)
    node_of.emplace(tree->entries[i], static_cast<uint32_t>(i + 1));
  // The blob in the order the scan hands the files over (shard by shard, each in its order).
  std::vector<uint32_t> order;
  order.reserve(tree->entries.size());
  for (size_t i = 0; i < ds.shard_count(); i++)
    for (const auto& e : ds.shard(i).entries) order.push_back(node_of.at(&e));
  auto img = ErofsImage::Plan(tree->nodes, opts.image, order);
  if (!img.ok()) return img.status();
  auto dir = format::OpenEmptyDest(dest);
  if (!dir.ok()) return dir.status();
  auto meta = Create(dir->get(), kMetaName);
  if (!meta.ok()) return meta.status();
  auto blob = Create(dir->get(), kBlobName);
  if (!blob.ok()) return blob.status();
  BlobWriter out(blob->get(), img->BlockSize());
  uint64_t files = 0;
  for (const Node& n : tree->nodes) files += S_ISREG(n.mode) && n.link == kNone;
  FS_RETURN_IF_ERROR(out.Map(img->blob_size(), files));
  format::DecoderPool decoders(&ds.dict());
  const BlobWriter::Fill fill = out.Filler(
      &decoders, [&](const format::IndexEntry& e) { return img->BlobOffset(node_of.at(&e)); });
  FS_RETURN_IF_ERROR(format::ScanAll(ds, opts.threads, opts.progress, fill.small, fill.large));
  FS_RETURN_IF_ERROR(out.FlushAll());
  if (::ftruncate(blob->get(), static_cast<off_t>(img->blob_size())) != 0)
    return Status::FromErrno("size the image's blob", errno);
  return img->WriteMeta(meta->get());
}

}  // namespace fanstore::image

namespace fanstore::image {

BlobWriter::Fill BlobWriter::Filler(format::DecoderPool* decoders,
                                    std::function<uint64_t(const format::IndexEntry&)> at) {
  Fill f;
  f.small = [this, decoders, at](const format::IndexEntry& e, std::string_view stored) -> Status {
    if (e.type != format::EntryType::kFile) return Status::OK();
    std::string_view raw;
    FS_RETURN_IF_ERROR(decoders->Get()->Decode(e, stored, nullptr, &raw));
    const uint64_t off = at(e);
    return raw.empty() ? Status::OK() : Add(off, raw);
  };
  f.large = [this, at](const format::IndexEntry& e, const format::DecodeFn& decode) -> Status {
    uint64_t off = at(e);
    return decode([&](std::string_view piece) {  // large pieces: written as they come
      Status st = Write(off, piece);
      off += piece.size();
      return st;
    });
  };
  return f;
}

Status BlobWriter::Add(uint64_t off, std::string_view bytes) {
  Run* r;
  {
    std::lock_guard<std::mutex> l(mu_);
    r = &runs_[std::this_thread::get_id()];
  }
  if (!r->bytes.empty() && r->start + r->bytes.size() != off) FS_RETURN_IF_ERROR(Flush(r));
  if (r->bytes.empty()) r->start = off;
  r->bytes.append(bytes);
  r->bytes.resize((r->bytes.size() + block_ - 1) / block_ * block_, '\0');
  return r->bytes.size() >= (1u << 20) ? Flush(r) : Status::OK();
}

Status BlobWriter::FlushAll() {
  for (auto& [id, r] : runs_) FS_RETURN_IF_ERROR(Flush(&r));
  return Status::OK();
}

BlobWriter::~BlobWriter() {
  if (map_) ::munmap(map_, map_size_);
}

Status BlobWriter::Map(uint64_t size, uint64_t files) {
  if (size == 0 || map_ || files == 0 || size / files < kMapMeanFileSize) return Status::OK();
  if (::fallocate(fd_, 0, 0, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    if (err == ENOSPC || err == EDQUOT)
      return Status::FromErrno(name_ + ": reserve " + std::to_string(size) + " bytes", err);
    return Status::OK();  // a file system that cannot reserve: the writes take turns
  }
  // Every page of the mapping is now reserved: a write through it never meets a full disk
  // (which would be SIGBUS, not an error).
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
    return Status::FromErrno(name_ + ": size", errno);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return Status::OK();
  map_ = static_cast<char*>(p);
  map_size_ = size;
  return Status::OK();
}

Status BlobWriter::Write(uint64_t off, std::string_view bytes) {
  if (map_ && off <= map_size_ && bytes.size() <= map_size_ - off) {
    std::memcpy(map_ + off, bytes.data(), bytes.size());
    return Status::OK();
  }
  std::lock_guard<std::mutex> l(write_mu_);
  return PwriteFull(fd_, bytes, off, name_);
}

Status BlobWriter::Flush(Run* r) {
  Status st = Write(r->start, r->bytes);
  r->start += r->bytes.size();
  r->bytes.clear();
  return st;
}

}  // namespace fanstore::image
