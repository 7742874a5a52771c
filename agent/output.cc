// The job's output on this node (see agent.h and output/drainer.h).
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "agent/agent.h"
#include "common/log.h"
#include "common/private_dir.h"
#include "common/remove_tree.h"
#include "common/text.h"

namespace fanstore::agent {
namespace {

// A job may leave thousands of files undrained: the log names this many, the manifest all.
constexpr size_t kMaxNamed = 100;

}  // namespace

Status Agent::StartOutput() {
  if (cfg_.output.empty()) return Status::OK();
  FS_RETURN_IF_ERROR(
      EnsureOwnDir(cfg_.output_dir, &created_output_).Prefixed("the output directory"));
  const mode_t mask = ::umask(0);  // the job's, as the copies on the parallel file system get it
  ::umask(mask);
  output::DrainerOptions o;
  o.local = cfg_.output_dir;
  o.target = cfg_.output;
  o.node = cfg_.node_name;
  o.umask = mask;
  o.activity = [this] { return ReadActivity(); };
  auto drainer = std::make_unique<output::Drainer>();
  FS_RETURN_IF_ERROR(drainer->Start(o).Prefixed("--output " + cfg_.output));
  drainer_ = std::move(drainer);
  return Status::OK();
}

bool Agent::FinishOutput() {
  if (!drainer_) return true;
  const char* tag = output::kReportTag;
  const output::DrainStats before = drainer_->Stats();
  if (before.files_pending > 0)
    LOG_INFO("%s waiting up to %g s for %llu file(s), %s, to drain to %s", tag,
             cfg_.drain_timeout_s, static_cast<unsigned long long>(before.files_pending),
             HumanBytes(static_cast<double>(before.bytes_pending)).c_str(), cfg_.output.c_str());
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(cfg_.drain_timeout_s * 1e3));
  const output::DrainReport r = drainer_->Finish(deadline);
  if (!r.manifest_error.empty())
    LOG_ERROR("%s the manifest %s/%s was not written: %s", tag, cfg_.output.c_str(),
              output::kManifestName, r.manifest_error.c_str());
  if (r.not_drained.empty()) {
    LOG_INFO("%s %llu file(s), %s, drained to %s", tag,
             static_cast<unsigned long long>(r.files_drained),
             HumanBytes(static_cast<double>(r.bytes_drained)).c_str(), cfg_.output.c_str());
    Status removed = RemoveTree(cfg_.output_dir);
    if (!removed.ok()) LOG_WARN("%s %s", tag, removed.ToString().c_str());
    return r.manifest_error.empty();
  }
  LOG_ERROR("%s %zu file(s) did not reach %s within %g s; they stay on %s in %s:", tag,
            r.not_drained.size(), cfg_.output.c_str(), cfg_.drain_timeout_s, cfg_.node_name.c_str(),
            cfg_.output_dir.c_str());
  size_t named = 0;
  for (const auto& [rel, why] : r.not_drained) {
    if (named++ == kMaxNamed) {
      LOG_ERROR("%s   ... and %zu more (the manifest lists them all)", tag,
                r.not_drained.size() - kMaxNamed);
      break;
    }
    LOG_ERROR("%s   %s: %s", tag, rel.c_str(), why.c_str());
  }
  return false;
}

uint64_t Agent::ReadActivity() const {
  uint64_t n = 0;
  for (uint64_t b : ServedBytes()) n += b;
  if (table::ClientCounters* cc = client_counters_.load())
    n += __atomic_load_n(&cc->local_opens, __ATOMIC_RELAXED);  // files opened, not yet read
  const RemoteFiles::Counters r = remote_.counters();
  return n + r.opens_remote + r.opens_cached + r.opens_fallback;
}

nlohmann::json Agent::OutputJson() const {
  const output::DrainStats s = drainer_->Stats();
  nlohmann::json j = {{"target", cfg_.output},
                      {"dir", cfg_.output_dir},
                      {"files_pending", s.files_pending},
                      {"bytes_pending", s.bytes_pending},
                      {"files_drained", s.files_drained},
                      {"bytes_drained", s.bytes_drained},
                      {"files_failed", s.files_failed},
                      {"retries", s.retries},
                      {"rate_bytes_per_s", s.rate_bytes_per_s},
                      {"yielded_seconds", s.yielded_seconds}};
  if (!s.last_error.empty()) j["last_error"] = s.last_error;
  return j;
}

}  // namespace fanstore::agent
