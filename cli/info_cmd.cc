// `fanstore info DS.fs`: the manifest summary.
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "common/hash.h"
#include "common/text.h"
#include "format/manifest.h"

namespace fanstore::cli {

int CmdInfo(int argc, char** argv) {
  CLI::App app(
      "Prints the manifest summary: files, directories, bytes, shards and compression ratio.",
      "fanstore info");
  Configure(app);
  bool json = false;
  std::string path;
  app.add_option("DS.fs", path, "the dataset")->required();
  app.add_flag("--json", json, "print the manifest as JSON");
  if (int rc = args::Parse(app, argc, argv); rc >= 0) return rc;

  auto m = format::LoadManifest(path);
  if (!m.ok()) return Fail(m.status());
  if (json) {
    std::fputs(format::ManifestToJson(*m).c_str(), stdout);
    return kExitOk;
  }
  uint64_t shard_bytes = 0, min_b = UINT64_MAX, max_b = 0;
  for (const auto& s : m->shards) {
    shard_bytes += s.bytes;
    min_b = std::min(min_b, s.bytes);
    max_b = std::max(max_b, s.bytes);
  }
  std::printf("dataset:      %s\n", path.c_str());
  std::printf("format:       fanstore v%u (written by fanstore %s on %s)\n", m->version,
              m->tool_version.c_str(), m->created.c_str());
  std::printf("dataset id:   %s\n", HashHex(m->dataset_id).c_str());
  std::printf("files:        %llu\n", (unsigned long long)m->files);
  std::printf("directories:  %llu\n", (unsigned long long)m->dirs);
  std::printf("symlinks:     %llu\n", (unsigned long long)m->symlinks);
  std::printf("raw bytes:    %llu (%s)\n", (unsigned long long)m->raw_bytes,
              HumanBytes(m->raw_bytes).c_str());
  std::printf("stored bytes: %llu (%s)\n", (unsigned long long)m->stored_bytes,
              HumanBytes(m->stored_bytes).c_str());
  std::printf("compression:  %s level %d, ratio %.2f%s\n", m->codec.c_str(), m->level,
              m->stored_bytes ? static_cast<double>(m->raw_bytes) / m->stored_bytes : 1.0,
              m->dict.file.empty() ? "" : (", dictionary " + HumanBytes(m->dict.bytes)).c_str());
  std::printf("shards:       %zu, %s in all (smallest %s, largest %s)\n", m->shards.size(),
              HumanBytes(shard_bytes).c_str(), HumanBytes(min_b).c_str(),
              HumanBytes(max_b).c_str());
  return kExitOk;
}

}  // namespace fanstore::cli
