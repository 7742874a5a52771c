// `fanstore pack` from tar archives (plain or compressed, archives inside archives, WebDataset
// shards): members are read as a stream and go straight into shards, never onto a file system.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "pack/pack.h"

namespace fanstore::pack {

// Whether `name` ends like a tar archive (.tar, .tar.gz, .tgz, .tar.zst, .tar.xz, .tar.bz2);
// returns the length of that suffix, else 0.
size_t ArchiveSuffix(const std::string& name);

// Packs the archives `srcs` ("-" is standard input) into the temporary dataset directory `tmp`.
// One archive's members land at the dataset's root; with several, each archive's members land
// in a directory named after it (its name without the suffix), as an archive found inside
// another does.
Status PackArchives(const std::vector<std::string>& srcs, const std::string& tmp,
                    const Options& opts, mode_t dir_mode, Stats* stats);

}  // namespace fanstore::pack
