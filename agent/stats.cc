// status.json and the counters served as kStats (see agent.h).
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "agent/agent.h"

namespace fanstore::agent {

std::string Agent::StatusJson() const {
  nlohmann::json j;
  {
    std::lock_guard<std::mutex> l(state_mu_);
    j["state"] = state_;
    if (!error_.empty()) j["error"] = error_;
  }
  j["unpacked"] = unpacker_.done();
  j["node"] = cfg_.node_name;
  j["rank"] = boot_ ? boot_->rank() : 0;
  j["size"] = boot_ ? boot_->size() : 0;
  j["mount"] = cfg_.mount;
  j["pid"] = ::getpid();
  j["shards"] = mine_;
  if (boot_ && boot_->size() > 1 && cfg_.peers) j["endpoint"] = peer_server_.Endpoint();
  return j.dump(-1, ' ', false,
                nlohmann::json::error_handler_t::replace);  // paths need not be UTF-8
}

std::string Agent::StatsJson() const {
  nlohmann::json j;
  j["node"] = cfg_.node_name;
  j["rank"] = boot_ ? boot_->rank() : 0;
  j["size"] = boot_ ? boot_->size() : 0;
  j["shards_staged"] = mine_.size();
  j["files_staged"] = staged_files_.load();
  j["bytes_staged"] = staged_bytes_.load();
  j["bytes_read_from_source"] = read_bytes_.load();
  j["stage_in_seconds"] = stage_seconds_.load();
  j["exchange_seconds"] = exchange_seconds_;
  j["exchange_bytes"] = exchange_bytes_;
  // Clients open staged and cached files themselves and count those opens in shared memory;
  // the agent counts what it serves.
  table::ClientCounters c{};
  if (client_counters_) {
    c.local_opens = __atomic_load_n(&client_counters_->local_opens, __ATOMIC_RELAXED);
    c.local_bytes = __atomic_load_n(&client_counters_->local_bytes, __ATOMIC_RELAXED);
    c.cached_opens = __atomic_load_n(&client_counters_->cached_opens, __ATOMIC_RELAXED);
    c.cached_bytes = __atomic_load_n(&client_counters_->cached_bytes, __ATOMIC_RELAXED);
  }
  const RemoteFiles::Counters r = remote_.counters();
  j["opens"] = {{"local", opens_local_.load() + c.local_opens},
                {"remote", r.opens_remote},
                {"cached", r.opens_cached + c.cached_opens},
                {"fallback", r.opens_fallback},
                {"errors", open_errors_.load()}};
  j["bytes"] = {{"local", c.local_bytes},
                {"remote", r.bytes_remote},
                {"cached", r.bytes_cached + c.cached_bytes},
                {"fallback", r.bytes_fallback}};
  j["peers"] = {{"fetch_errors", r.peer_errors}, {"refused_connections", peer_server_.refused()}};
  j["source_reads"] = {{"in_flight_peak", r.source_peak}, {"limit", RemoteFiles::kMaxSourceReads}};
  j["cache"] = {{"used", remote_.cache().used()},
                {"capacity", remote_.cache().capacity()},
                {"evictions", remote_.cache().evictions()}};
  j["unpack"] = {{"mode", lazy_ ? "lazy" : "eager"},
                 {"done", unpacker_.done()},
                 {"on_demand", unpacker_.on_demand()},
                 {"seconds", unpacker_.seconds()}};
  j["prefetch"] = {{"shards", r.prefetched_shards},
                   {"files", r.prefetched_files},
                   {"bytes", r.prefetched_bytes}};
  return j.dump(-1, ' ', false,
                nlohmann::json::error_handler_t::replace);  // paths need not be UTF-8
}

}  // namespace fanstore::agent
