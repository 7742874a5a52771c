// Option values and the node count (see options.h).
#include "spank-plugin/options.h"

#include "common/env.h"
#include "common/path.h"
#include "common/text.h"

namespace fanstore::spank {

const char* OptionName(UserOption which) {
  switch (which) {
    case kOptDataset:
      return "fanstore";
    case kOptMount:
      return "fanstore-mount";
    case kOptReplicas:
      return "fanstore-replicas";
    case kOptStats:
      return "fanstore-stats";
    case kOptOutput:
      return "fanstore-output";
    case kOptDrainTimeout:
      return "fanstore-drain-timeout";
    case kOptUnpack:
      return "fanstore-unpack";
  }
  return "fanstore-?";
}

Status SetUserOption(UserOptions* opts, UserOption which, const std::string& value) {
  const std::string name = OptionName(which);
  if (value.empty()) return Status::InvalidArgument("--" + name + ": a value is required");
  std::string* field = nullptr;
  std::string v = value;
  switch (which) {
    case kOptDataset:
      field = &opts->dataset;
      v = TrimTrailingSlashes(v);
      break;
    case kOptMount:
      field = &opts->mount;
      v = TrimTrailingSlashes(v);
      break;
    case kOptReplicas:
      field = &opts->replicas;
      break;
    case kOptStats:
      field = &opts->stats;
      break;
    case kOptOutput:
      field = &opts->output;
      v = TrimTrailingSlashes(v);
      break;
    case kOptDrainTimeout:
      field = &opts->drain_timeout;
      break;
    case kOptUnpack:
      field = &opts->unpack;
      break;
  }
  if (field == nullptr)
    return Status::InvalidArgument("unknown option id " + std::to_string(which));
  if (!field->empty() && *field != v)
    return Status::InvalidArgument("--" + name + " given twice, as '" + *field + "' and '" + v +
                                   "'");
  *field = v;
  return Status::OK();
}

Result<uint32_t> ParseNodeCount(const std::optional<std::string>& value) {
  if (!value) return 0u;
  if (auto n = ParseInt(*value, 1, kMaxNodes)) return static_cast<uint32_t>(*n);
  return Status::InvalidArgument(std::string(env::kSlurmJobNumNodes) + "='" + value->substr(0, 40) +
                                 "' is not a node count");
}

}  // namespace fanstore::spank
