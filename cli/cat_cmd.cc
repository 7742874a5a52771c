// `fanstore cat DS.fs PATH`: one file of a dataset on standard output, checked.
#include <unistd.h>

#include <string>

#include "cli/cli.h"
#include "common/io.h"
#include "format/dataset.h"

namespace fanstore::cli {

int CmdCat(int argc, char** argv) {
  CLI::App app(
      "Writes the content of the file PATH in the dataset to standard output, after checking it.\n"
      "A file larger than 4 MiB is written as it is decoded and checked at the end: when the\n"
      "check fails, cat exits 1 and what it wrote must be discarded.",
      "fanstore cat");
  Configure(app);
  std::string ds_path, file;
  app.add_option("DS.fs", ds_path, "the dataset")->required();
  app.add_option("PATH", file, "the file's path inside the dataset")->required();
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;

  auto ds = format::Dataset::Open(ds_path);
  if (!ds.ok()) return Fail(ds.status());
  const std::string path = DatasetPath(file);
  format::Dataset::Ref r;
  const format::IndexEntry* e = (*ds)->Find(path, &r);
  if (!e) return Fail(Status::NotFound(path + ": no such file in the dataset"));
  if (e->type == format::EntryType::kDir)
    return Fail(Status::InvalidArgument(path + " is a directory"));
  const format::ShardFile& sh = (*ds)->shard(r.shard);
  Status s;
  if (e->size <= format::kStreamAbove && e->stored_len <= format::kStreamAbove) {
    // Checked whole before a byte is written.
    format::FrameDecoder dec(&(*ds)->dict());
    std::string data;
    s = format::ReadEntry(sh, *e, &dec, &data);
    if (s.ok()) s = WriteFull(STDOUT_FILENO, data.data(), data.size(), "standard output");
  } else {
    // Streamed, in bounded memory; its hash is checked at the end (exit status 1 if it fails).
    s = format::StreamFrame(sh.fd.get(), sh.path, *e, &(*ds)->dict(), [](std::string_view piece) {
      return WriteFull(STDOUT_FILENO, piece.data(), piece.size(), "standard output");
    });
  }
  if (!s.ok()) return Fail(s);
  return kExitOk;
}

}  // namespace fanstore::cli
