// `fanstore pack SRC DST.fs`: packs a directory tree into a dataset.
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
      "Packs the directory tree SRC into the new dataset directory DST.fs: manifest.json and\n"
      "shard files balanced by bytes. Files, directories (also empty ones) and symlinks that\n"
      "point inside SRC are stored; sockets, devices, FIFOs and symlinks pointing outside are\n"
      "skipped with a warning. DST.fs is written under a temporary name and renamed into place\n"
      "when complete, so an interrupted pack never leaves a dataset that looks valid.",
      "fanstore pack");
  Configure(app);
  pack::Options o;
  bool no_sync = false, quiet = false, force_progress = false;
  std::string src, dst;
  app.add_option("SRC", src, "the directory tree to pack")->required();
  app.add_option("DST.fs", dst, "the dataset directory to create (must not exist)")->required();
  app.add_option("--shard-size", o.shard_size,
                 "target shard size, e.g. 64M, 1G (default 256M). More shards\n"
                 "spread better across nodes.")
      ->type_name("SIZE")
      ->transform(args::Size());
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
  Status s = pack::Pack(src, dst, o, &st);
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
