// `fanstore pack SRC... DST.fs`: packs a directory tree, or tar archives, into a dataset.
#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "common/text.h"
#include "pack/pack.h"

namespace fanstore::cli {
namespace {

void PrintSummary(const pack::Stats& st, const std::string& dst, double secs) {
  std::printf("packed %llu files, %llu directories, %llu symlinks into %llu shard(s) at %s\n",
              (unsigned long long)st.files, (unsigned long long)st.dirs,
              (unsigned long long)st.symlinks, (unsigned long long)st.shards, dst.c_str());
  std::printf("%s raw -> %s stored (ratio %.2f)%s in %.2f s (%s/s)\n",
              HumanBytes(st.raw_bytes).c_str(), HumanBytes(st.stored_bytes).c_str(),
              st.stored_bytes ? static_cast<double>(st.raw_bytes) / st.stored_bytes : 1.0,
              st.dict_used ? " with a dictionary" : "", secs,
              HumanBytes(secs > 0 ? st.raw_bytes / secs : 0).c_str());
  if (st.skipped)
    std::printf("%llu entries skipped (see warnings above)\n", (unsigned long long)st.skipped);
}

}  // namespace

int CmdPack(int argc, char** argv) {
  CLI::App app(
      "Packs the directory tree SRC, or one or more tar archives, into the new dataset\n"
      "directory DST.fs: manifest.json and shard files balanced by bytes. Files, directories\n"
      "(also empty ones), hard links and symlinks that point inside SRC are stored, with their\n"
      "modes, mtimes, ctimes and user.* extended attributes; sockets, devices, FIFOs and\n"
      "symlinks pointing outside are skipped with a warning.\n"
      "Archives (plain or compressed tar, pax, WebDataset shards; - is standard input) are read\n"
      "as a stream and never extracted. With one archive its members are the dataset's root;\n"
      "with several, each archive's members go into a directory named after it, as do those of\n"
      "an archive inside an archive (ImageNet's training tar holds one per class).\n"
      "DST.fs is written under a temporary name and renamed into place when complete, so an\n"
      "interrupted pack never leaves a dataset that looks valid.",
      "fanstore pack");
  Configure(app, " DST.fs");
  pack::Options o;
  bool no_sync = false, quiet = false, force_progress = false;
  std::vector<std::string> srcs;
  app.add_option("SRC", srcs,
                 "the directory tree, or the archives, to pack; the last argument,\n"
                 "DST.fs, is the dataset directory to create (must not exist)")
      ->required();
  app.add_option("--shard-size", o.shard_size,
                 "target shard size, e.g. 64M, 1G (default 256M). More shards\n"
                 "spread better across nodes.")
      ->type_name("SIZE")
      ->transform(args::Size());
  app.add_option("--shard-files", o.shard_files,
                 "at most N files per shard (default 1048576), so that datasets of\n"
                 "millions of tiny files still spread across nodes")
      ->type_name("N")
      ->check(args::IntRange(1, 1 << 24));
  bool keep_inner = false;
  app.add_flag("--keep-inner-archives", keep_inner,
               "store an archive found inside an archive as a file, instead of its\n"
               "members in a directory named after it");
  app.add_option("--level", o.level,
                 "zstd level 1-19, 0 to store raw (default 3). Each file is stored\n"
                 "compressed only when that makes it smaller.")
      ->type_name("N")
      ->check(args::IntRange(0, 19));
  AddThreads(app, &o.threads, "compression");
  app.add_flag("--dict", o.dict,
               "train a zstd dictionary, for many small files that compress poorly\n"
               "on their own (text, JSON)");
  app.add_flag("--no-sync", no_sync, "do not fsync the output (faster; not crash-safe)");
  AddQuiet(app, &quiet);
  AddProgress(app, &force_progress);
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;
  o.sync = !no_sync;
  o.inner_archives = !keep_inner;
  if (srcs.size() < 2) return args::UsageError(app, "DST.fs is required");
  const std::string dst = srcs.back();
  srcs.pop_back();

  Progress progress("pack", ProgressMode(quiet, force_progress));
  o.progress = [&](uint64_t d, uint64_t t, uint64_t fd, uint64_t ft) {
    progress.Update(d, t, fd, ft);
  };
  o.warn = [&](const std::string& w) {
    progress.Done();
    std::fprintf(stderr, "fanstore: warning: %s\n", w.c_str());
  };
  o.cancel = &g_cancel;
  pack::Stats st;
  Status s = pack::Pack(srcs, dst, o, &st);
  progress.Done();
  if (!s.ok()) {
    if (g_cancel) {
      std::fprintf(stderr, "fanstore: pack interrupted; nothing was left at %s\n", dst.c_str());
      return kExitBad;
    }
    return Fail(s.Prefixed("pack"));
  }
  if (!quiet) PrintSummary(st, dst, progress.Seconds());
  return kExitOk;
}

}  // namespace fanstore::cli
