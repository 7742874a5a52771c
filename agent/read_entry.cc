#include "agent/read_entry.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common/io.h"
#include "format/manifest.h"
#include "format/shard.h"
#include "stage/stage.h"

namespace fanstore::agent {

Status ReadEntry(const std::string& dataset, uint32_t shard, uint32_t index,
                 const std::function<Status(std::string_view)>& sink) {
  auto m = format::LoadManifest(dataset);
  if (!m.ok()) return m.status();
  if (shard >= m->shards.size()) return Status::InvalidArgument("no shard " + std::to_string(shard) + " in " + dataset);
  format::Dictionary dict;
  FS_RETURN_IF_ERROR(dict.Load(dataset, m->dict));
  auto shards = stage::OpenShards(dataset, *m, {shard});
  if (!shards.ok()) return shards.status();
  const format::ShardFile& sh = *(*shards)[0];
  if (index >= sh.entries.size() || sh.entries[index].type != format::EntryType::kFile)
    return Status::InvalidArgument("no file at index " + std::to_string(index) + " of " + sh.path);
  return format::StreamFrame(sh.fd.get(), sh.path, sh.entries[index], &dict, sink);
}

int ReadEntryMain(int argc, char** argv) {
  char* end1 = nullptr;
  char* end2 = nullptr;
  const unsigned long shard = argc == 5 ? std::strtoul(argv[3], &end1, 10) : 0;
  const unsigned long index = argc == 5 ? std::strtoul(argv[4], &end2, 10) : 0;
  if (argc != 5 || *end1 || *end2 || shard > UINT32_MAX || index > UINT32_MAX) {
    std::fprintf(stderr, "usage: fanstore-agent --read-entry DATASET SHARD INDEX\n");
    return 2;
  }
  Status st = ReadEntry(argv[2], static_cast<uint32_t>(shard), static_cast<uint32_t>(index),
                        [](std::string_view piece) { return WriteFull(STDOUT_FILENO, piece.data(), piece.size(), "stdout"); });
  if (st.ok()) return 0;
  std::fprintf(stderr, "fanstore: %s\n", st.ToString().c_str());
  return st.code() == Status::Code::kCorruption ? 4 : 3;
}

}  // namespace fanstore::agent
