// `fanstore ls DS.fs [PATH]`: lists a dataset's entries.
#include <time.h>

#include <cstdio>
#include <ctime>
#include <string>

#include "cli/cli.h"
#include "format/dataset.h"

namespace fanstore::cli {
namespace {

using format::Dataset;
using format::EntryType;
using format::IndexEntry;

struct Listing {
  bool lng = false;    // -l: type, mode, size and mtime
  bool where = false;  // -w: shard file, frame offset, stored length, codec
};

std::string ModeString(const IndexEntry& e) {
  std::string s = e.type == EntryType::kDir ? "d" : e.type == EntryType::kSymlink ? "l" : "-";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; i++) s += (e.mode & (0400 >> i)) ? rwx[i] : '-';
  return s;
}

void PrintEntry(const Dataset& ds, const IndexEntry& e, const Listing& how,
                const std::string& shown) {
  if (how.where && e.type != EntryType::kDir) {
    Dataset::Ref r;
    ds.Find(e.path, &r);
    static const char* const kCodec[] = {"raw", "zstd", "zstd+dict"};
    std::printf("%s %s %llu %llu %s\n", shown.c_str(), ds.manifest().shards[r.shard].file.c_str(),
                (unsigned long long)e.offset, (unsigned long long)e.stored_len,
                kCodec[static_cast<int>(e.codec)]);
    return;
  }
  if (!how.lng) {
    std::printf("%s%s\n", shown.c_str(), e.type == EntryType::kDir ? "/" : "");
    return;
  }
  char when[32];
  time_t t = e.mtime_ns / 1000000000;
  struct tm tm;
  ::localtime_r(&t, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
  std::string extra;
  if (e.type == EntryType::kSymlink) {
    Dataset::Ref r;
    ds.Find(e.path, &r);
    format::FrameDecoder dec(&ds.dict());
    std::string target;
    if (format::ReadEntry(ds.shard(r.shard), e, &dec, &target).ok()) extra = " -> " + target;
  }
  std::printf("%s %12llu %s %s%s\n", ModeString(e).c_str(), (unsigned long long)e.size, when,
              shown.c_str(), extra.c_str());
}

}  // namespace

int CmdLs(int argc, char** argv) {
  CLI::App app(
      "Lists the dataset's entries. Without PATH, every entry; with a directory PATH, its\n"
      "children; with a file PATH, that file.",
      "fanstore ls");
  Configure(app);
  Listing how;
  std::string ds_path, dir;
  app.add_option("DS.fs", ds_path, "the dataset")->required();
  CLI::Option* dir_opt = app.add_option("PATH", dir, "a directory or file inside the dataset");
  app.add_flag("-l,--long", how.lng, "type, mode, size and mtime");
  app.add_flag("-w,--where", how.where,
               "where each file is stored: shard file, frame offset, stored length, codec");
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;

  auto ds = Dataset::Open(ds_path);
  if (!ds.ok()) return Fail(ds.status());
  auto all = (*ds)->SortedEntries();
  if (dir_opt->count() == 0) {
    for (auto* e : all) PrintEntry(**ds, *e, how, e->path);
    return kExitOk;
  }
  const std::string path = DatasetPath(dir);
  if (!path.empty()) {
    const IndexEntry* e = (*ds)->Find(path);
    if (!e) return Fail(Status::NotFound(path + ": no such file or directory in the dataset"));
    if (e->type != EntryType::kDir) {
      PrintEntry(**ds, *e, how, e->path);
      return kExitOk;
    }
  }
  const std::string prefix = path.empty() ? "" : path + "/";
  for (auto* e : all) {
    if (e->path.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = e->path.substr(prefix.size());
    if (rest.find('/') != std::string::npos) continue;
    PrintEntry(**ds, *e, how, rest);
  }
  return kExitOk;
}

}  // namespace fanstore::cli
