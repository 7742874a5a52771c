#include "agent/read_entry.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/args.h"
#include "common/io.h"
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

int ReadEntryMain(int argc, char** argv) {
  CLI::App app("Writes one file of the dataset to standard output, checked against its hash.",
               "fanstore-agent --read-entry");
  args::Configure(app);
  app.footer(
      "Exit status: 0 written, 2 usage error, 3 the dataset cannot be read, 4 its bytes are\n"
      "damaged (what was written must then be discarded).");
  std::string dataset;
  uint32_t shard = 0, index = 0;
  app.add_option("DATASET", dataset, "the dataset directory")->required();
  app.add_option("SHARD", shard, "the shard's number in the manifest")
      ->required()
      ->check(args::IntRange(0, UINT32_MAX));
  app.add_option("INDEX", index, "the file's index in the shard")
      ->required()
      ->check(args::IntRange(0, UINT32_MAX));
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;
  Status st = ReadEntry(dataset, shard, index, [](std::string_view piece) {
    return WriteFull(STDOUT_FILENO, piece.data(), piece.size(), "stdout");
  });
  if (st.ok()) return 0;
  std::fprintf(stderr, "fanstore: %s\n", st.ToString().c_str());
  return st.code() == Status::Code::kCorruption ? 4 : 3;
}

}  // namespace fanstore::agent
