// For tests: small datasets crafted entry by entry, so a test can build exactly the shard it
// means (a duplicate path, a missing parent, a bad frame) with valid checksums around it.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <zstd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/hash.h"
#include "common/testing/temp_dir.h"
#include "format/format.h"
#include "format/manifest.h"

namespace fanstore::format::testing {

inline void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A scratch directory for one test (common/testing/temp_dir.h).
using ::fanstore::test::TempDir;

inline IndexEntry Dir(std::string path) {
  IndexEntry e;
  e.type = EntryType::kDir;
  e.mode = 0755;
  e.path = std::move(path);
  return e;
}

// A raw file entry whose frame is `content`, at `off` within the data area.
inline IndexEntry RawFile(std::string path, uint64_t off, const std::string& content) {
  IndexEntry e;
  e.mode = 0644;
  e.path = std::move(path);
  e.offset = off;
  e.size = e.stored_len = content.size();
  e.xxh3 = Xxh3(content);
  return e;
}

inline std::string Zstd(const std::string& raw, int level = 3) {
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), level));
  return out;
}

// A whole shard: header, `data` (entry offsets are relative to it), compressed index, footer.
inline std::string CraftShard(uint64_t dataset_id, uint32_t shard_id,
                              std::vector<IndexEntry> entries, const std::string& data) {
  for (auto& e : entries)
    if (e.type != EntryType::kDir) e.offset += kHeaderSize;
  const std::string raw = EncodeIndexRaw(entries);
  const std::string stored = Zstd(raw);
  Footer f;
  f.index_offset = kHeaderSize + data.size();
  f.index_stored_len = stored.size();
  f.index_raw_len = raw.size();
  f.index_xxh3 = Xxh3(stored);
  f.entry_count = static_cast<uint32_t>(entries.size());
  f.shard_id = shard_id;
  f.dataset_id = dataset_id;
  return EncodeHeader({kVersion, shard_id, dataset_id}) + data + stored + EncodeFooter(f);
}

inline Manifest TestManifest(uint64_t dataset_id) {
  Manifest m;
  m.version = kVersion;
  m.tool_version = "test";
  m.created = "2026-01-01T00:00:00Z";
  m.dataset_id = dataset_id;
  return m;
}

// Writes `shards` (whole shard files) as shard-00000.fsd ... into `dir` (created) with a
// manifest that lists them faithfully.
inline void WriteDataset(const std::string& dir, uint64_t dataset_id,
                         const std::vector<std::string>& shards) {
  ::mkdir(dir.c_str(), 0755);
  Manifest m = TestManifest(dataset_id);
  for (size_t i = 0; i < shards.size(); i++) {
    char name[32];
    std::snprintf(name, sizeof name, "shard-%05zu.fsd", i);
    WriteFile(dir + "/" + name, shards[i]);
    m.shards.push_back({name, shards[i].size(), 0, Xxh3(shards[i])});
  }
  WriteFile(dir + "/" + kManifestName, ManifestToJson(m));
}

}  // namespace fanstore::format::testing
