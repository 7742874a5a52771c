// `fanstore verify DS.fs`: reads every shard and checks every hash and structure.
#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "common/text.h"
#include "format/dataset.h"

namespace fanstore::cli {

int CmdVerify(int argc, char** argv) {
  CLI::App app(
      "Reads every shard completely and checks the manifest, each shard's header, index and\n"
      "footer, the checksum of each shard and of every file. On the first problem, prints the\n"
      "shard, the file and the offset, and exits 1.",
      "fanstore verify");
  Configure(app);
  format::VerifyOptions o;
  bool quiet = false, force_progress = false;
  std::string path;
  app.add_option("DS.fs", path, "the dataset")->required();
  AddThreads(app, &o.threads, "reading and checking");
  AddQuiet(app, &quiet);
  AddProgress(app, &force_progress);
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;

  auto ds = format::Dataset::Open(path);
  if (!ds.ok()) return Fail(ds.status());
  Progress progress("verify", ProgressMode(quiet, force_progress));
  o.progress = [&](uint64_t d, uint64_t t, uint64_t f, uint64_t ft) {
    progress.Update(d, t, f, ft);
  };
  Status s = format::Verify(**ds, o);
  progress.Done();
  if (!s.ok()) return Fail(s);
  if (!quiet) {
    const auto& m = (*ds)->manifest();
    std::printf("OK: %llu files, %llu shards, %s verified in %.2f s\n", (unsigned long long)m.files,
                (unsigned long long)m.shards.size(), HumanBytes(m.raw_bytes).c_str(),
                progress.Seconds());
  }
  return kExitOk;
}

}  // namespace fanstore::cli
