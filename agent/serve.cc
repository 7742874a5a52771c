// Serving: opens from the node's clients, and this node's files for its peers (see agent.h).
#include <fcntl.h>

#include "agent/agent.h"
#include "common/log.h"

namespace fanstore::agent {

Reply Agent::Handle(proto::Op op, const std::string& payload, UniqueFD passed) {
  switch (op) {
    case proto::kStatus:
      return Reply{0, StatusJson(), -1};
    case proto::kStats:
      return Reply{0, StatsJson(payload == proto::kStatsSeries), -1};
    case proto::kOpen:
      return Open(payload);
    case proto::kServeView:
      return ServeView(std::move(passed));
  }
  return Reply{EINVAL, "", -1};
}

Reply Agent::Open(const std::string& path) {
  {
    std::lock_guard<std::mutex> l(state_mu_);
    if (state_ != AgentState::kReady) return Reply{EAGAIN, "", -1};
  }
  const table::Entry* te = view_.Lookup(path);
  if (te) te = &view_.Target(*te);  // a hard link opens its file
  uint32_t shard, entry;
  if (!te || !view_.Source(*te, &shard, &entry) || shard >= index_.size() ||
      entry >= index_.count(shard))
    return Reply{ENOENT, "", -1};
  auto fail = [&](const Status& st) {
    open_errors_++;
    LOG_ERROR("open %s: %s", path.c_str(), st.ToString().c_str());
    return Reply{st.ToErrno(), "", -1};
  };
  if (!local_shard_[shard]) {
    auto fd = remote_.Open(shard, entry);
    return fd.ok() ? Reply{0, "", *fd} : fail(fd.status());
  }
  if (lazy_ && !unpacker_.done()) {
    Status st = unpacker_.EnsureUnpacked(shard, entry);
    if (!st.ok()) return fail(st);
  }
  int fd = ::open((data_root_ + "/" + std::string(view_.Path(*te))).c_str(),
                  O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    open_errors_++;
    return Reply{errno, "", -1};
  }
  opens_local_++;
  return Reply{0, "", fd};
}

Reply Agent::ServeView(UniqueFD dev) {
  {
    std::lock_guard<std::mutex> l(state_mu_);
    if (state_ != AgentState::kReady) return Reply{EAGAIN, "the agent is not serving yet", -1};
  }
  Status st = kernel_view_.Serve(std::move(dev));
  if (!st.ok()) {
    LOG_ERROR("kernel-visible view: %s", st.ToString().c_str());
    return Reply{st.ToErrno(), st.message(), -1};
  }
  LOG_INFO("kernel-visible view: serving a task's mount (%zu now)", kernel_view_.mounts());
  return Reply{0, "", -1};
}

int Agent::ServeLocal(uint32_t shard, uint32_t entry, int* fd, uint64_t* size) {
  if (!serving_.load(std::memory_order_acquire))
    return EAGAIN;  // only a confused peer asks this early
  if (shard >= index_.size() || !local_shard_[shard] || entry >= index_.count(shard)) return ENOENT;
  if (!index_.IsFile(shard, entry)) return EINVAL;
  const std::string path(index_.Path(shard, entry));
  if (lazy_ && !unpacker_.done()) {
    Status st = unpacker_.EnsureUnpacked(shard, entry);
    if (!st.ok()) {
      LOG_ERROR("serve %s to a peer: %s", path.c_str(), st.ToString().c_str());
      return EIO;
    }
  }
  *fd = ::open((data_root_ + "/" + path).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (*fd < 0) return errno;
  *size = index_.Size(shard, entry);
  return 0;
}

std::vector<uint32_t> Agent::ShardFiles(uint32_t shard) {
  std::vector<uint32_t> out;
  if (!serving_.load(std::memory_order_acquire) || shard >= index_.size() || !local_shard_[shard])
    return out;
  for (uint32_t i = 0; i < index_.count(shard); i++)
    if (index_.IsFile(shard, i)) out.push_back(i);
  return out;
}

}  // namespace fanstore::agent
