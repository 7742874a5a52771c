// `fanstore run --output DIR` (see run_output.h).
#include "cli/run_output.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/remove_tree.h"
#include "common/text.h"
#include "spank-plugin/node.h"

namespace fanstore::cli {

RunOutput::RunOutput(std::string target, std::string local_parent, double drain_timeout_s)
    : target_(std::move(target)), parent_(std::move(local_parent)), timeout_s_(drain_timeout_s) {}

RunOutput::~RunOutput() {
  if (drainer_) (void)Finish();
}

bool RunOutput::Start() {
  std::string tmpl = parent_ + "/fanstore-output.XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "fanstore: run: cannot create an output directory in %s: %s\n",
                 parent_.c_str(), std::strerror(errno));
    return false;
  }
  local_ = tmpl;
  const mode_t mask = ::umask(0);
  ::umask(mask);
  output::DrainerOptions o;
  o.local = local_;
  o.target = target_;
  const Result<std::string> node = spank::NodeName();  // as the plugin names it
  o.node = node.ok() ? node.value() : "localhost";
  o.umask = mask;
  drainer_ = std::make_unique<output::Drainer>();
  Status st = drainer_->Start(o);
  if (!st.ok()) {
    std::fprintf(stderr, "fanstore: run: --output: %s\n", st.ToString().c_str());
    drainer_.reset();
    return false;
  }
  return true;
}

bool RunOutput::Finish() {
  if (!drainer_) return true;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  const output::DrainReport r = drainer_->Finish(deadline);
  drainer_.reset();
  if (!r.manifest_error.empty())
    std::fprintf(stderr, "fanstore: run: the manifest %s/%s was not written: %s\n", target_.c_str(),
                 output::kManifestName, r.manifest_error.c_str());
  if (r.not_drained.empty()) {
    (void)RemoveTree(local_);
    return r.manifest_error.empty();
  }
  std::fprintf(stderr,
               "fanstore: run: %zu output file(s) did not reach %s within %g s; they stay in %s:\n",
               r.not_drained.size(), target_.c_str(), timeout_s_, local_.c_str());
  for (const auto& [rel, why] : r.not_drained)
    std::fprintf(stderr, "fanstore: run:   %s: %s\n", rel.c_str(), why.c_str());
  return false;
}

}  // namespace fanstore::cli
