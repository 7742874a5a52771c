// Shard files (see shard_out.h).
#include "pack/shard_out.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>

#include "common/io.h"

namespace fanstore::pack {

Status ShardOut::Open(const std::string& path, uint32_t id, uint64_t dataset_id) {
  path_ = path;
  id_ = id;
  dataset_id_ = dataset_id;
  fd_.Reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_));
  if (!fd_.valid()) return Status::FromErrno("create " + path, errno);
  return Write(format::EncodeHeader({format::kVersion, id, dataset_id}));
}

Status ShardOut::Write(std::string_view data) {
  hash_.Update(data.data(), data.size());
  pos_ += data.size();
  FS_RETURN_IF_ERROR(WriteFull(fd_.get(), data.data(), data.size(), path_));
  constexpr uint64_t kWritebackStep = 8u << 20;
  if (writeback_ && pos_ - written_back_ >= kWritebackStep) {
    // Starts the writeback of what was written since, without waiting for it.
    (void)::sync_file_range(fd_.get(), static_cast<off_t>(written_back_),
                            static_cast<off_t>(pos_ - written_back_), SYNC_FILE_RANGE_WRITE);
    written_back_ = pos_;
  }
  return Status::OK();
}

Status ShardOut::Rollback(const Mark& m) {
  if (::ftruncate(fd_.get(), static_cast<off_t>(m.pos)) != 0 ||
      ::lseek(fd_.get(), static_cast<off_t>(m.pos), SEEK_SET) < 0)
    return Status::FromErrno("truncate " + path_, errno);
  pos_ = m.pos;
  written_back_ = std::min(written_back_, pos_);
  hash_ = m.hash;
  return Status::OK();
}

Status ShardOut::Finish(bool sync, format::ShardRef* ref) {
  std::string raw = format::EncodeIndexRaw(entries_);
  std::string stored(ZSTD_compressBound(raw.size()), '\0');
  size_t n = ZSTD_compress(stored.data(), stored.size(), raw.data(), raw.size(), 3);
  if (ZSTD_isError(n))
    return Status::IOError(std::string("compress index: ") + ZSTD_getErrorName(n));
  stored.resize(n);
  format::Footer f;
  f.index_offset = pos_;
  f.index_stored_len = n;
  f.index_raw_len = raw.size();
  f.index_xxh3 = Xxh3(stored);
  f.entry_count = static_cast<uint32_t>(entries_.size());
  f.shard_id = id_;
  f.dataset_id = dataset_id_;
  FS_RETURN_IF_ERROR(Write(stored));
  FS_RETURN_IF_ERROR(Write(format::EncodeFooter(f)));
  if (sync && ::fdatasync(fd_.get()) != 0) return Status::FromErrno("fsync " + path_, errno);
  fd_.Reset();
  ref->bytes = pos_;
  ref->xxh3 = hash_.Digest();
  return Status::OK();
}

std::string ShardName(uint32_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard-%05u.fsd", i);
  return buf;
}

}  // namespace fanstore::pack
