// The large exchange's messages over the peer service (see gather.h).
#include "agent/gather.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "common/log.h"

namespace fanstore::agent {

void Gather::Begin(uint32_t rank, uint32_t size, std::string mine) {
  std::lock_guard<std::mutex> l(mu_);
  rank_ = rank;
  size_ = size;
  ended_ = false;
  msgs_.assign(size, nullptr);
  msgs_[rank] = std::make_shared<const std::string>(std::move(mine));
}

int Gather::Wait(uint32_t rank, int wait_ms, std::shared_ptr<const std::string>* out) {
  std::unique_lock<std::mutex> l(mu_);
  if (ended_) return ESHUTDOWN;
  if (rank >= size_) return EINVAL;
  const bool got = arrived_.wait_for(l, std::chrono::milliseconds(wait_ms),
                                     [&] { return ended_ || msgs_[rank] != nullptr; });
  if (ended_) return ESHUTDOWN;
  if (!got) return ETIMEDOUT;
  *out = msgs_[rank];
  return 0;
}

bool Gather::Ended() {
  std::lock_guard<std::mutex> l(mu_);
  return ended_;
}

bool Gather::Has(uint32_t r) {
  std::lock_guard<std::mutex> l(mu_);
  return r < msgs_.size() && msgs_[r] != nullptr;  // none once ended
}

Status Gather::Keep(uint32_t r, std::string m, uint32_t via) {
  if (!pointers_[r] || !pointers_[r]->Matches(m))
    return Status::Corruption("metadata exchange: the message of rank " + std::to_string(r) +
                              " from rank " + std::to_string(via) + " does not match its pointer");
  std::lock_guard<std::mutex> l(mu_);
  if (ended_) return Status::Aborted("metadata exchange: ended");
  if (!msgs_[r]) msgs_[r] = std::make_shared<const std::string>(std::move(m));
  arrived_.notify_all();
  return Status::OK();
}

std::vector<Gather::Step> Gather::Schedule(uint32_t rank, uint32_t size) {
  std::vector<Step> steps;
  for (uint64_t step = 1; step < size; step <<= 1) {
    const auto from = static_cast<uint32_t>((rank + step) % size);
    steps.push_back({from, from, static_cast<uint32_t>(std::min<uint64_t>(step, size - step))});
  }
  return steps;
}

Status Gather::Run(PeerClient* peers, const std::vector<std::optional<exchange::Pointer>>& pointers,
                   std::vector<std::string>* in_fence, const std::vector<uint64_t>& bound) {
  if (pointers.size() != size_ || in_fence->size() != size_ || bound.size() != size_)
    return Status::InvalidArgument("metadata exchange: ranks do not match the job's size");
  pointers_ = pointers;
  for (uint32_t r = 0; r < size_; r++) {
    if (!pointers_[r]) {  // the message itself came in the fence
      std::lock_guard<std::mutex> l(mu_);
      if (!msgs_[r]) msgs_[r] = std::make_shared<const std::string>(std::move((*in_fence)[r]));
      continue;
    }
    if (pointers_[r]->size > bound[r])
      return Status::Corruption("metadata exchange: rank " + std::to_string(r) + " announces " +
                                std::to_string(pointers_[r]->size) +
                                " bytes of indexes, more than its shards hold");
  }
  if (!pointers_[rank_] || !pointers_[rank_]->Matches(mine()))
    return Status::Corruption("metadata exchange: this agent's pointer does not match its message");
  std::vector<std::string>().swap(*in_fence);
  auto expect = [&](uint32_t r) { return pointers_[r] ? pointers_[r]->size : 0; };
  auto fetch = [&](uint32_t from, uint32_t first, uint32_t count, int64_t wait_ms) {
    return peers->FetchMessages(
        from, first, count, size_, static_cast<int>(std::max<int64_t>(wait_ms, 0)), expect,
        [&](uint32_t r, std::string m) { return Keep(r, std::move(m), from); });
  };
  for (const Step& s : Schedule(rank_, size_)) {
    Status st = fetch(s.from, s.first, s.count, wait_ms_);
    if (!st.ok())  // the rest come from their own agents below
      LOG_WARN("metadata exchange: messages from rank %u: %s", s.from, st.ToString().c_str());
  }
  // What is still missing is asked of its publisher, again and again until the deadline: a
  // publisher whose connection slots another user floods, or that is slow, may answer later.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms_);
  for (uint32_t r = 0; r < size_; r++) {
    for (int pause_ms = 50; !Has(r); pause_ms = std::min(2 * pause_ms, 1000)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      Status st = Ended() ? Status::Aborted("ended") : fetch(r, r, 1, left.count());
      if (st.ok()) break;
      if (Ended() || left.count() <= pause_ms || st.code() == Status::Code::kCorruption)
        return st.Prefixed("metadata exchange: the indexes of rank " + std::to_string(r));
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    }
  }
  return Status::OK();
}

std::vector<std::string_view> Gather::Views() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string_view> v;
  for (const auto& m : msgs_) v.emplace_back(m ? std::string_view(*m) : std::string_view());
  return v;
}

void Gather::End() {
  std::lock_guard<std::mutex> l(mu_);
  ended_ = true;
  std::vector<std::shared_ptr<const std::string>>().swap(msgs_);
  arrived_.notify_all();
}

}  // namespace fanstore::agent
