// status.json and the counters served as kStats (see agent.h).
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/io.h"
#include "common/log.h"

namespace fanstore::agent {

nlohmann::json Agent::StagingJson() const {
  return {{"bytes_done", read_bytes_.load()},
          {"bytes_total", stage_bytes_total_.load()},
          {"files_done", staged_files_.load()},
          {"files_total", stage_files_total_.load()}};
}

std::array<uint64_t, 4> Agent::ServedBytes() const {
  // Clients read staged and cached files themselves and count them in shared memory.
  uint64_t local = 0, cached = 0;
  if (table::ClientCounters* cc = client_counters_.load()) {
    local = __atomic_load_n(&cc->local_bytes, __ATOMIC_RELAXED);
    cached = __atomic_load_n(&cc->cached_bytes, __ATOMIC_RELAXED);
  }
  const RemoteFiles::Counters r = remote_.counters();
  return {local, r.bytes_remote, r.bytes_cached + cached, r.bytes_fallback};
}

nlohmann::json Agent::SeriesJson() const {
  // Column by column: a third of the size of one object per sample, for the 1 MiB reply.
  nlohmann::json t = nlohmann::json::array(), staged = t, read = t;
  std::array<nlohmann::json, 4> served = {t, t, t, t};
  std::lock_guard<std::mutex> l(series_mu_);
  for (const Sample& s : series_) {
    t.push_back(s.t);
    for (size_t k = 0; k < 4; k++) served[k].push_back(s.served[k]);
    staged.push_back(s.staged);
    read.push_back(s.read);
  }
  return {{"interval", 1},       {"t", t},
          {"local", served[0]},  {"remote", served[1]},
          {"cached", served[2]}, {"fallback", served[3]},
          {"staged", staged},    {"read", read}};
}

void Agent::Tick() {
  Sample s;
  s.t = std::round(SecondsSince(started_) * 1000) / 1000;
  s.served = ServedBytes();
  s.staged = staged_bytes_.load();
  s.read = read_bytes_.load();
  {
    std::lock_guard<std::mutex> l(series_mu_);
    series_.push_back(s);
    if (series_.size() > kMaxSamples) series_.pop_front();
  }
  std::lock_guard<std::mutex> w(status_write_mu_);
  {
    std::lock_guard<std::mutex> l(state_mu_);
    // While staging its progress shows; with output, the drain's (a file a second).
    if (state_ != AgentState::kStaging && !drainer_) return;
  }
  Status st = WriteFileAtomic(cfg_.run_dir + "/" + kStatusName, StatusJson() + "\n", 0600);
  if (!st.ok()) LOG_ERROR("%s", st.ToString().c_str());
}

void Agent::StartTicker() {
  try {
    ticker_ = std::thread([this] {
      std::unique_lock<std::mutex> l(ticker_mu_);
      while (!ticker_cv_.wait_for(l, std::chrono::seconds(1), [this] { return ticker_stop_; })) {
        l.unlock();
        Tick();
        l.lock();
      }
    });
  } catch (const std::system_error& e) {  // no thread to be had: no samples, nothing worse
    LOG_WARN("no samples over time: %s", e.what());
  }
}

void Agent::StopTicker() {
  {
    std::lock_guard<std::mutex> l(ticker_mu_);
    ticker_stop_ = true;
  }
  ticker_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

std::string Agent::StatusJson() const {
  nlohmann::json j;
  {
    std::lock_guard<std::mutex> l(state_mu_);
    j["state"] = run_dir::StateName(state_);
    if (!error_.empty()) j["error"] = error_;
  }
  j["unpacked"] = unpacker_.done();
  j["local_copy"] =
      image_mounted_ ? "image" : "files";  // the kernel-native path (issue 31), or not
  j["whole"] = HoldsEveryShard();
  if (const int64_t entered = exchange_entered_ns_.load(); entered != 0)
    j["exchange_waiting_seconds"] = static_cast<double>(SteadyNs() - entered) / 1e9;
  j["node"] = cfg_.node_name;
  j["rank"] = boot_ ? boot_->rank() : 0;
  j["size"] = boot_ ? boot_->size() : 0;
  j["mount"] = cfg_.mount;
  j["pid"] = ::getpid();
  j["shards"] = mine_;
  if (boot_ && boot_->size() > 1 && cfg_.peers) j["endpoint"] = peer_server_.Endpoint();
  j["staging"] = StagingJson();
  if (drainer_) j["output"] = OutputJson();
  return j.dump(-1, ' ', false,
                nlohmann::json::error_handler_t::replace);  // paths need not be UTF-8
}

double CpuSeconds() {
  struct rusage ru;
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

std::string Agent::StatsJson(bool series) const {
  nlohmann::json j;
  {
    std::lock_guard<std::mutex> l(state_mu_);
    j["state"] = run_dir::StateName(state_);
  }
  j["node"] = cfg_.node_name;
  j["rank"] = boot_ ? boot_->rank() : 0;
  j["size"] = boot_ ? boot_->size() : 0;
  j["local_copy"] = image_mounted_ ? "image" : "files";
  j["shards_staged"] = mine_.size();
  j["files_staged"] = staged_files_.load();
  j["bytes_staged"] = staged_bytes_.load();
  j["bytes_read_from_source"] = read_bytes_.load();
  j["stage_in_seconds"] = stage_seconds_.load();
  j["exchange_seconds"] = exchange_seconds_;
  j["exchange_bytes"] = exchange_bytes_;
  j["exchange_via"] = exchange_via_;
  j["staging"] = StagingJson();
  // Clients open staged and cached files themselves and count those opens in shared memory;
  // the agent counts what it serves (the bytes likewise, see ServedBytes).
  table::ClientCounters c{};
  if (table::ClientCounters* cc = client_counters_.load()) {
    c.local_opens = __atomic_load_n(&cc->local_opens, __ATOMIC_RELAXED);
    c.self_unpacks = __atomic_load_n(&cc->self_unpacks, __ATOMIC_RELAXED);
    c.cached_opens = __atomic_load_n(&cc->cached_opens, __ATOMIC_RELAXED);
  }
  const RemoteFiles::Counters r = remote_.counters();
  j["opens"] = {{"local", opens_local_.load() + c.local_opens},
                {"remote", r.opens_remote},
                {"cached", r.opens_cached + c.cached_opens},
                {"fallback", r.opens_fallback},
                {"errors", open_errors_.load()}};
  const auto served = ServedBytes();
  j["bytes"] = {
      {"local", served[0]}, {"remote", served[1]}, {"cached", served[2]}, {"fallback", served[3]}};
  j["peers"] = {{"fetch_errors", r.peer_errors},
                {"opens_that_waited_for_a_fetch", r.opens_waited},
                {"opens_that_gave_up_waiting", r.opens_waited_out},
                {"refused_connections", peer_server_.refused()},
                {"evicted_connections", peer_server_.evicted()}};
  j["source_reads"] = {{"in_flight_peak", r.source_peak}, {"limit", RemoteFiles::kMaxSourceReads}};
  j["cache"] = {{"used", remote_.cache().used()},
                {"capacity", remote_.cache().capacity()},
                {"evictions", remote_.cache().evictions()}};
  j["unpack"] = {{"mode", lazy_ ? "lazy" : "eager"},
                 {"done", unpacker_.done()},
                 {"on_demand", unpacker_.on_demand()},
                 {"by_clients", c.self_unpacks},
                 {"seconds", unpacker_.seconds()}};
  // The whole agent's CPU seconds when it reported ready, when its unpack ended, and now.
  j["cpu_seconds"] = {
      {"ready", cpu_ready_.load()}, {"unpacked", cpu_unpacked_.load()}, {"now", CpuSeconds()}};
  j["prefetch"] = {{"shards", r.prefetched_shards},
                   {"files", r.prefetched_files},
                   {"bytes", r.prefetched_bytes}};
  if (drainer_) j["output"] = OutputJson();
  if (series) j["series"] = SeriesJson();
  return j.dump(-1, ' ', false,
                nlohmann::json::error_handler_t::replace);  // paths need not be UTF-8
}

}  // namespace fanstore::agent
