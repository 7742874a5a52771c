#include "agent/read_entry.h"

#include <string>

#include "format/manifest.h"
#include "format/shard.h"
#include "stage/stage.h"

namespace fanstore::agent {

Status ReadEntry(const std::string& dataset, uint32_t shard, uint32_t index,
                 const std::function<Status(std::string_view)>& sink) {
  auto m = format::LoadManifest(dataset);
  if (!m.ok()) return m.status();
  if (shard >= m->shards.size())
    return Status::InvalidArgument("no shard " + std::to_string(shard) + " in " + dataset);
  format::Dictionary dict;
  FS_RETURN_IF_ERROR(dict.Load(dataset, m->dict));
  auto shards = stage::OpenShards(dataset, *m, {shard});
  if (!shards.ok()) return shards.status();
  const format::ShardFile& sh = *(*shards)[0];
  if (index >= sh.entries.size() || sh.entries[index].type != format::EntryType::kFile)
    return Status::InvalidArgument("no file at index " + std::to_string(index) + " of " + sh.path);
  return format::StreamFrame(sh.fd.get(), sh.path, sh.entries[index], &dict, sink);
}

}  // namespace fanstore::agent
