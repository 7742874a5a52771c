// manifest.json: the dataset's summary and its list of shards (see docs/format.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fanstore::format {

struct ShardRef {
  std::string file;  // a plain file name inside the dataset directory
  uint64_t bytes = 0;
  uint64_t files = 0;
  uint64_t xxh3 = 0;  // of the whole shard file
};

struct DictRef {
  std::string file;  // empty: no dictionary
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  uint32_t id = 0;
};

struct Manifest {
  uint32_t version = 0;
  std::string tool_version;
  std::string created;  // ISO 8601, UTC
  uint64_t dataset_id = 0;
  uint64_t files = 0, dirs = 0, symlinks = 0;
  uint64_t raw_bytes = 0, stored_bytes = 0;
  uint32_t root_mode = 0755;  // permission bits of the packed tree's top directory
  int64_t root_mtime_ns = 0;
  // Version 3: the top directory's ctime, size and extended attributes (common/xattrs.h,
  // encoded; hex in the JSON). Older manifests: mtime, 0, none.
  int64_t root_ctime_ns = 0;
  uint64_t root_size = 0;
  std::string root_xattrs;
  std::string codec = "zstd";
  int level = 3;
  DictRef dict;
  std::vector<ShardRef> shards;
};

std::string ManifestToJson(const Manifest& m);
// Parses and validates (format name, version, types, shard names). Never throws.
Result<Manifest> ManifestFromJson(const std::string& text);
// Reads DIR/manifest.json. Errors name the file.
Result<Manifest> LoadManifest(const std::string& dataset_dir);

}  // namespace fanstore::format
