// `fanstore extract DS.fs DEST`: restores the tree under DEST, or writes it there as an EROFS
// image (--erofs).
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "format/dataset.h"
#include "image/dataset_image.h"

namespace fanstore::cli {

int CmdExtract(int argc, char** argv) {
  CLI::App app(
      "Restores the tree under DEST (created; if it exists it must be empty): content, modes,\n"
      "mtimes, user.* extended attributes, empty directories, hard links, symlinks and the holes\n"
      "of sparse files. Every file is verified. Nothing is ever written outside DEST.\n"
      "With --erofs, DEST gets two files instead of the tree: image.erofs (the metadata) and\n"
      "data.blob (every file's bytes), a read-only EROFS image that root mounts with mount(2) on\n"
      "the file itself (Linux 6.12+): mount(\"DEST/image.erofs\", DIR, \"erofs\",\n"
      "MS_RDONLY|MS_NOSUID|MS_NODEV, \"device=DEST/data.blob\"). See fanstore(1).",
      "fanstore extract");
  Configure(app);
  format::ExtractOptions o;
  bool quiet = false, force_progress = false, erofs = false;
  std::string path, dest;
  app.add_option("DS.fs", path, "the dataset")->required();
  app.add_option("DEST", dest, "the directory to restore into")->required();
  app.add_flag("--erofs", erofs,
               "write an EROFS image (image.erofs + data.blob) instead of the tree");
  AddThreads(app, &o.threads, "decompression");
  AddQuiet(app, &quiet);
  AddProgress(app, &force_progress);
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;

  auto ds = format::Dataset::Open(path);
  if (!ds.ok()) return Fail(ds.status());
  Progress progress("extract", ProgressMode(quiet, force_progress));
  o.progress = [&](uint64_t d, uint64_t t, uint64_t f, uint64_t ft) {
    progress.Update(d, t, f, ft);
  };
  Status s;
  if (erofs) {
    image::WriteOptions w;
    w.threads = o.threads;
    w.progress = o.progress;
    w.image.uid = ::getuid();
    w.image.gid = ::getgid();
    s = image::WriteDatasetImage(**ds, dest, w);
  } else {
    s = format::Extract(**ds, dest, o);
  }
  progress.Done();
  if (!s.ok()) return Fail(s.Prefixed("extract"));
  if (!quiet)
    std::printf(erofs ? "wrote %llu files to the image in %s in %.2f s\n"
                      : "extracted %llu files to %s in %.2f s\n",
                (unsigned long long)(*ds)->manifest().files, dest.c_str(), progress.Seconds());
  return kExitOk;
}

}  // namespace fanstore::cli
