// The node agent.
#include "agent/agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "agent/peer_wire.h"
#include "agent/placement.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/private_dir.h"
#include "common/table.h"
#include "common/unique_fd.h"
#include "common/io.h"
#include "stage/stage.h"

namespace fanstore::agent {
namespace {

using format::EntryType;
using format::IndexEntry;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Lazy unpack: the state of one file of a local shard.
enum : uint8_t { kPacked = 0, kBusy = 1, kDone = 2 };

// Background work yields to the job's processes (nice is per thread on Linux); once per thread.
void LowerThreadPriority() {
  thread_local bool done = false;
  if (!done) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  done = true;
}

// --- the metadata-exchange blob --------------------------------------------------------------
// u32 magic | u32 version | u32 ok | str error | str endpoint | u32 records |
//   records: u32 shard | u64 shard file size | footer (64 B) | str stored index | u32 links | (str path, str target)*
// str = u32 length + bytes. Every agent publishes the indexes of the shards it is primary for.
constexpr uint32_t kBlobMagic = 0x58534d46;  // "FMSX"
constexpr uint32_t kBlobVersion = 1;

void Put32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void Put64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void PutStr(std::string& s, std::string_view v) {
  Put32(s, static_cast<uint32_t>(v.size()));
  s.append(v);
}

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool U32(uint32_t* v) {
    if (b_.size() - pos_ < 4) return false;
    std::memcpy(v, b_.data() + pos_, 4);
    pos_ += 4;
    return true;
  }
  bool U64(uint64_t* v) {
    if (b_.size() - pos_ < 8) return false;
    std::memcpy(v, b_.data() + pos_, 8);
    pos_ += 8;
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (b_.size() - pos_ < n) return false;
    *out = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool Str(std::string_view* out) {
    uint32_t n;
    return U32(&n) && Bytes(n, out);
  }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

// The blob's head: whether this agent succeeded so far and, if not, why. The second round
// of the exchange (every agent staged its share) sends the head alone.
std::string BlobHead(const Status& st) {
  std::string b;
  Put32(b, kBlobMagic);
  Put32(b, kBlobVersion);
  Put32(b, st.ok() ? 1 : 0);
  PutStr(b, st.ok() ? "" : st.ToString());
  return b;
}

Status ReadBlobHead(Reader& rd, uint32_t rank) {
  uint32_t magic, version, ok;
  std::string_view err;
  if (!rd.U32(&magic) || magic != kBlobMagic || !rd.U32(&version) || version != kBlobVersion || !rd.U32(&ok) || !rd.Str(&err))
    return Status::Corruption("metadata exchange: bad data from rank " + std::to_string(rank));
  if (!ok) return Status::Aborted("agent of rank " + std::to_string(rank) + " failed: " + std::string(err));
  return Status::OK();
}

}  // namespace

Agent::Agent(Config cfg) : cfg_(std::move(cfg)) {}

Agent::~Agent() {
  for (auto& [id, fd] : shard_fds_) ::close(fd);
}

void Agent::WriteStatus(const std::string& state, const std::string& error) {
  {
    std::lock_guard<std::mutex> l(state_mu_);
    state_ = state;
    error_ = error;
  }
  if (!have_run_) return;
  Status s = WriteFileAtomic(cfg_.run_dir + "/" + kStatusName, StatusJson() + "\n", 0600);
  if (!s.ok()) LOG_ERROR("%s", s.ToString().c_str());
}

std::string Agent::StatusJson() const {
  nlohmann::json j;
  {
    std::lock_guard<std::mutex> l(state_mu_);
    j["state"] = state_;
    if (!error_.empty()) j["error"] = error_;
  }
  j["unpacked"] = unpacked_.load();
  j["node"] = cfg_.node_name;
  j["rank"] = boot_ ? boot_->rank() : 0;
  j["size"] = boot_ ? boot_->size() : 0;
  j["mount"] = cfg_.mount;
  j["pid"] = ::getpid();
  j["shards"] = mine_;
  if (boot_ && boot_->size() > 1 && cfg_.peers) j["endpoint"] = peer_server_.Endpoint();
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // paths need not be UTF-8
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
  j["opens"] = {{"local", opens_local_.load() + c.local_opens}, {"remote", opens_remote_.load()},
                {"cached", opens_cached_.load() + c.cached_opens}, {"fallback", opens_fallback_.load()},
                {"errors", open_errors_.load()}};
  j["bytes"] = {{"local", c.local_bytes}, {"remote", bytes_remote_.load()}, {"cached", bytes_cached_.load() + c.cached_bytes},
                {"fallback", bytes_fallback_.load()}};
  j["peers"] = {{"fetch_errors", peer_errors_.load()}, {"refused_connections", peer_server_.refused()}};
  j["source_reads"] = {{"in_flight_peak", source_peak_.load()}, {"limit", kMaxSourceReads}};
  j["cache"] = {{"used", cache_.used()}, {"capacity", cache_.capacity()}, {"evictions", cache_.evictions()}};
  j["unpack"] = {{"mode", lazy_ ? "lazy" : "eager"}, {"done", unpacked_.load()}, {"on_demand", unpacked_on_demand_.load()},
                 {"seconds", unpack_seconds_.load()}};
  j["prefetch"] = {{"shards", prefetched_shards_.load()}, {"files", prefetched_files_.load()}, {"bytes", prefetched_bytes_.load()}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // paths need not be UTF-8
}

Status Agent::Prepare() {
  FS_RETURN_IF_ERROR(EnsureOwnDir(cfg_.run_dir, &created_run_));
  have_run_ = true;
  // Held until exit: readers of status.json tell a dead agent from a live one by it.
  auto alive = run_dir::HoldAlive(cfg_.run_dir);
  if (!alive.ok()) return alive.status();
  alive_lock_ = std::move(alive).value();
  WriteStatus("starting", "");
  bool made_local = false;
  FS_RETURN_IF_ERROR(EnsureOwnDir(cfg_.local_dir, &made_local).Prefixed("local directory"));
  created_local_ = made_local;
  have_local_ = true;
  // The local directory must be empty: the agent owns what is in it and removes it at the end.
  DIR* d = ::opendir(cfg_.local_dir.c_str());
  if (!d) return Status::FromErrno("local directory " + cfg_.local_dir, errno);
  int count = 0;
  while (struct dirent* de = ::readdir(d)) count += std::strcmp(de->d_name, ".") && std::strcmp(de->d_name, "..");
  ::closedir(d);
  if (count) return Status::InvalidArgument("local directory " + cfg_.local_dir + " is not empty");
  if (::access(cfg_.local_dir.c_str(), W_OK) != 0)
    return Status::FromErrno("local directory " + cfg_.local_dir + " is not writable", errno);
  data_root_ = cfg_.local_dir + "/data";
  for (const std::string& d : {data_root_, cfg_.local_dir + "/cache"})
    if (::mkdir(d.c_str(), 0700) != 0) return Status::FromErrno("local directory: create " + d, errno);
  data_root_fd_.Reset(::open(data_root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!data_root_fd_.valid()) return Status::FromErrno("open " + data_root_, errno);
  auto m = format::LoadManifest(cfg_.dataset);
  if (!m.ok()) return m.status();
  manifest_ = std::move(m).value();
  FS_RETURN_IF_ERROR(dict_.Load(cfg_.dataset, manifest_.dict));
  pool_ = std::make_unique<ThreadPool>(cfg_.threads ? cfg_.threads : ThreadPool::DefaultThreads());
  FS_RETURN_IF_ERROR(server_.Start(cfg_.run_dir + "/" + kSocketName,
                                   [this](proto::Op op, const std::string& p) { return Handle(op, p); }));
  server_started_ = true;
  return Status::OK();
}

Status Agent::ChooseUnpack() {
  // Free space is measured once, before anything is written: the copy may run while the
  // exact check (PlanStage) is made.
  struct statvfs vfs;
  const bool measured = ::statvfs(cfg_.local_dir.c_str(), &vfs) == 0;
  free_bytes_ = measured ? static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize : UINT64_MAX;
  // A file system without an inode limit (tmpfs with nr_inodes=0) reports no inodes at all.
  free_inodes_ = measured && vfs.f_files > 0 ? static_cast<uint64_t>(vfs.f_favail) : UINT64_MAX;
  // Lazy unpack pays off where creating many small files, not reading the source, bounds
  // stage-in. It is decided from the manifest, so that the copy starts at once. It needs room
  // for the shard copies and the files side by side until the background unpack is done;
  // this node's files are not known before its indexes are read, so they are estimated from
  // its share of the stored bytes here, and checked exactly in PlanStage.
  constexpr uint64_t kLazyMeanFileSize = 64 << 10;
  const format::Manifest& m = manifest_;
  lazy_ = cfg_.unpack == "lazy" || (cfg_.unpack == "auto" && m.files > 0 && m.raw_bytes / m.files < kLazyMeanFileSize);
  if (!lazy_) return Status::OK();
  uint64_t stored = 0;
  for (uint32_t s : mine_) stored += m.shards[s].bytes;
  const uint64_t files_estimate =
      m.stored_bytes ? static_cast<uint64_t>(static_cast<long double>(m.raw_bytes) * stored / m.stored_bytes) : m.raw_bytes;
  if (files_estimate + stored > free_bytes_) {
    lazy_ = false;
    if (cfg_.unpack == "lazy")
      LOG_WARN("--unpack lazy needs about %s for this node's shard copies and files; unpacking eagerly",
               HumanBytes(files_estimate + stored).c_str());
    return Status::OK();
  }
  copy_dir_ = cfg_.local_dir + "/shards";
  if (::mkdir(copy_dir_.c_str(), 0700) != 0) return Status::FromErrno("local directory: create " + copy_dir_, errno);
  return Status::OK();
}

// Inodes kept free beyond the share: the cache's files, the table's temporary, status.json.
constexpr uint64_t kSpareInodes = 64;

Status Agent::PlanStage(const Shards& shards, bool* lazy_fits) {
  uint64_t need = 0, files = 0, stored = 0, inodes = 0;
  for (const auto& sh : shards) {
    stored += sh->size;
    inodes += sh->entries.size();  // files, and the directories they need
    for (const auto& e : sh->entries)
      if (e.type == EntryType::kFile) files++, need += e.size;
  }
  // Every file is created before the job reads it (eager) or while it does (lazy): short of
  // inodes, reads would fail with ENOSPC after "ready".
  inodes += (lazy_ ? mine_.size() : 0) + kSpareInodes;
  if (inodes > free_inodes_)
    return Status::NoSpace("local directory " + cfg_.local_dir + " has " + std::to_string(free_inodes_) +
                           " free inodes; this node's share of the dataset (" + std::to_string(mine_.size()) + " of " +
                           std::to_string(manifest_.shards.size()) + " shards) needs " + std::to_string(inodes));
  if (need > free_bytes_)
    return Status::NoSpace("local directory " + cfg_.local_dir + " has " + HumanBytes(free_bytes_) + " free; this node's share of the dataset (" +
                           std::to_string(mine_.size()) + " of " + std::to_string(manifest_.shards.size()) + " shards) needs " + HumanBytes(need));
  *lazy_fits = !lazy_ || need + stored <= free_bytes_;
  const bool lazy = lazy_ && *lazy_fits;
  // The cache takes what is left after the staged share (and the copies, while they last):
  // half of it, or --cache-size when that is less (a site-wide cache_size= must not fill a
  // node whose disk is smaller).
  const uint64_t taken = need + (lazy ? stored : 0);
  const uint64_t half_left = free_bytes_ == UINT64_MAX || taken > free_bytes_ ? 0 : (free_bytes_ - taken) / 2;
  cache_capacity_ = cfg_.cache_size == 0 ? half_left : std::min(cfg_.cache_size, half_left);
  if (cfg_.cache_size > half_left)
    LOG_WARN("cache limited to %s, half the free space of %s left by the staged share (--cache-size %s)",
             HumanBytes(cache_capacity_).c_str(), cfg_.local_dir.c_str(), HumanBytes(cfg_.cache_size).c_str());
  LOG_INFO("staging %zu of %zu shards (%s in %llu files) into %s%s", mine_.size(), manifest_.shards.size(), HumanBytes(need).c_str(),
           static_cast<unsigned long long>(files), cfg_.local_dir.c_str(),
           lazy ? ": copying the shards, unpacking in the background once ready" : "");
  return lazy ? stage::MakeParentDirs(data_root_fd_.get(), data_root_, shards) : Status::OK();
}

// Tests hold the agent at a phase (FANSTORE_TEST_PAUSE=staging:MS or exchange:MS) to kill it or
// its peer there; the log line tells them it got there.
void Agent::TestPause(const std::string& phase) {
  const char* v = std::getenv("FANSTORE_TEST_PAUSE");
  if (!v || std::strncmp(v, phase.c_str(), phase.size()) != 0 || v[phase.size()] != ':') return;
  LOG_WARN("test pause: %s", phase.c_str());
  for (long ms = std::strtol(v + phase.size() + 1, nullptr, 10); ms > 0 && !stop_requested_; ms -= 10) ::usleep(10000);
}

Status Agent::Stage(const Shards* shards) {
  TestPause("staging");
  auto t0 = Clock::now();
  stage::Options so;
  so.pool = pool_.get();
  so.cancel = &stage_abort_;
  so.on_read = [this](uint64_t n) { read_bytes_ += n; };
  stage::Stats ss;
  Status st = lazy_ ? stage::CopyShards(cfg_.dataset, manifest_, dict_, mine_, copy_dir_, so, &ss)
                    : stage::StageShards(manifest_, dict_, *shards, data_root_, so, &ss);
  staged_files_ = ss.files;
  staged_bytes_ = ss.raw_bytes;
  stage_seconds_ = Since(t0);
  return st;
}

Result<std::string> Agent::EncodeRecords(const Shards& shards) {
  const uint32_t size = boot_->size(), rank = boot_->rank();
  std::string blob = BlobHead(Status::OK());
  PutStr(blob, size > 1 && cfg_.peers ? peer_server_.Endpoint() : "");
  std::vector<const format::ShardFile*> primary;
  for (const auto& sh : shards)
    if (Holders(sh->header.shard_id, size, replicas_)[0] == rank) primary.push_back(sh.get());
  Put32(blob, static_cast<uint32_t>(primary.size()));
  format::FrameDecoder dec(&dict_);
  for (const format::ShardFile* sh : primary) {
    Put32(blob, sh->header.shard_id);
    Put64(blob, sh->size);
    blob += format::EncodeFooter(sh->footer);
    PutStr(blob, sh->index_stored);
    std::vector<std::pair<std::string, std::string>> links;
    for (const auto& e : sh->entries) {
      if (e.type != EntryType::kSymlink) continue;
      std::string target;
      FS_RETURN_IF_ERROR(format::ReadEntry(*sh, e, &dec, &target));
      links.emplace_back(e.path, std::move(target));
    }
    Put32(blob, static_cast<uint32_t>(links.size()));
    for (auto& [p, t] : links) {
      PutStr(blob, p);
      PutStr(blob, t);
    }
  }
  return blob;
}

Status Agent::DecodeRecords(const std::vector<std::string>& all, const Shards& shards) {
  const uint32_t nshards = static_cast<uint32_t>(manifest_.shards.size());
  index_.assign(nshards, {});
  std::vector<bool> seen(nshards, false);
  std::vector<std::string> endpoints(all.size());
  for (uint32_t r = 0; r < all.size(); r++) {
    exchange_bytes_ += all[r].size();
    Reader rd(all[r]);
    FS_RETURN_IF_ERROR(ReadBlobHead(rd, r));
    uint32_t records;
    std::string_view endpoint;
    if (!rd.Str(&endpoint) || !rd.U32(&records)) return Status::Corruption("metadata exchange: bad data from rank " + std::to_string(r));
    endpoints[r] = std::string(endpoint);
    for (uint32_t i = 0; i < records; i++) {
      uint32_t shard, nlinks;
      uint64_t file_size;
      std::string_view footer_bytes, stored;
      if (!rd.U32(&shard) || shard >= nshards || seen[shard] || !rd.U64(&file_size) ||
          !rd.Bytes(format::kFooterSize, &footer_bytes) || !rd.Str(&stored))
        return Status::Corruption("metadata exchange: bad shard record from rank " + std::to_string(r));
      // Everything a peer sends is validated as if read from the shard itself.
      if (r == boot_->rank()) {
        // Our own records: the indexes read (and checked) at open, not decoded a second time.
        for (const auto& sh : shards)
          if (sh->header.shard_id == shard) index_[shard] = sh->entries;
      } else {
        format::Footer f;
        Status fs = format::DecodeFooter(footer_bytes, file_size, &f);
        if (!fs.ok()) return fs.Prefixed("metadata exchange: shard " + std::to_string(shard));
        auto entries = format::DecodeIndex(stored, f);
        if (!entries.ok()) return entries.status().Prefixed("metadata exchange: shard " + std::to_string(shard));
        index_[shard] = std::move(entries).value();
      }
      seen[shard] = true;
      if (!rd.U32(&nlinks)) return Status::Corruption("metadata exchange: bad link list");
      for (uint32_t k = 0; k < nlinks; k++) {
        std::string_view p, t;
        if (!rd.Str(&p) || !rd.Str(&t) || !format::IsContainedLink(p, t)) return Status::Corruption("metadata exchange: bad link");
        links_.emplace(std::string(p), std::string(t));
      }
    }
  }
  for (uint32_t s = 0; s < nshards; s++)
    if (!seen[s]) return Status::Corruption("metadata exchange: no agent published shard " + std::to_string(s));
  // Each target stays inside when resolved through the other links too, not only lexically.
  if (!links_.empty()) {
    std::unordered_set<std::string_view> dirs;
    for (const auto& entries : index_)
      for (const auto& e : entries)
        if (e.type == EntryType::kDir) dirs.insert(e.path);
    auto lookup = [&](const std::string& path, std::string* target) {
      if (path.empty() || dirs.count(path)) return format::NodeKind::kDir;
      auto it = links_.find(path);
      if (it == links_.end()) return format::NodeKind::kOther;
      *target = it->second;
      return format::NodeKind::kLink;
    };
    for (const auto& [path, target] : links_)
      if (!format::LinkStaysInside(path, target, lookup))
        return Status::Corruption("metadata exchange: symlink '" + path + "' leads out of the dataset");
  }
  peers_.SetEndpoints(std::move(endpoints));
  return Status::OK();
}

void Agent::Cancel() {
  stop_requested_ = true;
  stage_abort_ = true;
}

Status Agent::StageAndPublish(Status st) {
  const uint32_t size = boot_->size(), rank = boot_->rank();
  const uint32_t nshards = static_cast<uint32_t>(manifest_.shards.size());
  replicas_ = cfg_.replicas == 0 ? size : cfg_.replicas;
  mine_ = ShardsOf(rank, nshards, size, replicas_);
  local_shard_.assign(nshards, false);
  for (uint32_t s : mine_) local_shard_[s] = true;

  // 1. Lazy unpack copies the shards as they are: that needs only the manifest and starts
  // at once. Meanwhile this node's shards are opened (their indexes read) and the share
  // checked against the free space; eager unpack needs the indexes and starts after.
  Result<Shards> shards = Status::Aborted("not opened");
  std::future<Status> staged;
  auto stage_async = [&](const Shards* sh) -> Status {
    try {
      staged = std::async(std::launch::async, [this, sh] { return Stage(sh); });
      return Status::OK();
    } catch (const std::system_error& e) {  // no thread to be had (ulimit -u, pids cgroup)
      return Status::IOError(std::string("stage-in: start a thread: ") + e.what());
    }
  };
  auto stage_end = [&]() -> Status {
    if (!staged.valid()) return Status::OK();
    return staged.get();
  };
  if (st.ok()) {
    WriteStatus("staging", "");
    st = ChooseUnpack();
  }
  if (st.ok() && lazy_) st = stage_async(nullptr);
  if (st.ok()) {
    shards = stage::OpenShards(cfg_.dataset, manifest_, mine_);
    st = shards.status();
  }
  bool lazy_fits = true;
  if (st.ok()) st = PlanStage(*shards, &lazy_fits);
  if (st.ok() && !lazy_fits) {
    // The estimate let the copy start, the exact share does not fit beside it: unpack eagerly.
    LOG_WARN("this node's shard copies and files do not fit side by side in %s; unpacking eagerly", cfg_.local_dir.c_str());
    stage_abort_ = true;
    (void)stage_end();
    stage_abort_ = stop_requested_.load();
    st = RemoveTree(copy_dir_);
    read_bytes_ = 0;
    lazy_ = false;
  }
  // Files held here are served to the other agents once every agent is ready.
  if (st.ok() && size > 1 && cfg_.peers) {
    peer_pool_ = std::make_unique<ThreadPool>(8);
    const PeerIdentity me{wire::JobKey(boot_->nspace(), cfg_.job_id), rank};
    peers_.SetIdentity(me);
    auto addr = PeerListenAddress(cfg_.peer_addr);
    st = addr.status();
    if (st.ok())
      st = peer_server_.Start(
          *addr, me, [this](uint32_t s, uint32_t e, int* fd, uint64_t* n) { return ServeLocal(s, e, fd, n); },
          [this](uint32_t s) { return ShardFiles(s); }, peer_pool_.get());
  }
  std::string blob;
  if (st.ok()) {
    auto records = EncodeRecords(*shards);
    if (records.ok()) blob = std::move(records).value();
    else st = records.status();
  }
  if (st.ok() && !lazy_) st = stage_async(&*shards);
  if (!st.ok()) stage_abort_ = true;

  // 2. The indexes are exchanged and the table built while the shards are staged: the
  // staging is bound by the source, the table by one core.
  auto t1 = Clock::now();
  bool fenced = false;
  TestPause("exchange");
  auto all = boot_->Exchange(st.ok() ? blob : BlobHead(st), &fenced);
  exchange_seconds_ = Since(t1);
  if (st.ok() && !all.ok()) st = all.status().Prefixed("metadata exchange");
  if (st.ok()) st = DecodeRecords(*all, *shards);
  if (st.ok() && !stop_requested_) st = BuildTable();
  if (st.ok() && !stop_requested_) st = PublishTable();  // clients use it once the status says ready
  if (!st.ok()) stage_abort_ = true;
  Status stage_st = stage_end();
  if (st.ok()) st = stop_requested_ ? Status::Aborted("stage-in cancelled") : stage_st;
  if (st.ok() && lazy_) {
    st = stage::UseCopies(manifest_, *shards, copy_dir_);
    for (auto& sh : *shards) copies_[sh->header.shard_id] = std::move(sh);
  }
  // Peers may ask for files the moment the second round ends: everything they need is in
  // place before it starts.
  if (st.ok()) serving_.store(true, std::memory_order_release);
  if (!fenced) return st;  // the first round never met: no second round to wait for

  // 3. A second round tells every agent whether all of them staged their share, and if not
  // which failed and why; no agent reports ready unless every one can serve.
  auto verdicts = boot_->Exchange(BlobHead(st), nullptr);
  if (!st.ok()) return st;
  if (!verdicts.ok()) return verdicts.status().Prefixed("metadata exchange");
  for (uint32_t r = 0; r < verdicts->size(); r++) {
    Reader rd((*verdicts)[r]);
    FS_RETURN_IF_ERROR(ReadBlobHead(rd, r));
  }
  return Status::OK();
}

Status Agent::BuildTable() {
  const uint32_t nshards = static_cast<uint32_t>(index_.size());
  cache_.Init(cfg_.local_dir + "/cache", mine_.size() == nshards ? 0 : cache_capacity_);
  shard_raw_bytes_.assign(nshards, 0);
  for (uint32_t s = 0; s < nshards; s++)
    for (const auto& e : index_[s]) shard_raw_bytes_[s] += e.size;
  prefetch_seen_.assign(nshards, false);
  if (lazy_) {
    copies_.resize(nshards);
    unpack_state_.resize(nshards);
    table_index_.resize(nshards);
    for (uint32_t s : mine_) {
      unpack_state_[s].assign(index_[s].size(), kPacked);
      table_index_[s].assign(index_[s].size(), table::kNone);
    }
  }
  size_t total = 1;
  for (const auto& entries : index_) total += entries.size();
  std::vector<table::Node> nodes;
  nodes.reserve(total);
  for (uint32_t s = 0; s < index_.size(); s++) {
    for (const IndexEntry& e : index_[s]) {
      table::Node n{e.path, 0, e.size, e.mtime_ns, 0, {}};
      switch (e.type) {
        case EntryType::kFile:
          n.mode = S_IFREG | e.mode;
          n.source_shard = s;  // clients read it from the dataset if this agent dies
          n.source_index = static_cast<uint32_t>(&e - index_[s].data());
          n.flags = local_shard_[s] && !lazy_ ? uint32_t{table::kLocal} : 0u;
          break;
        case EntryType::kDir: n.mode = S_IFDIR | e.mode; break;
        case EntryType::kSymlink: {
          n.mode = S_IFLNK | 0777;
          auto it = links_.find(e.path);
          if (it == links_.end()) return Status::Corruption("symlink '" + e.path + "' has no target");
          n.link_target = it->second;
          break;
        }
      }
      nodes.push_back(n);
    }
  }
  nodes.push_back(table::Node{"", S_IFDIR | manifest_.root_mode, 0, manifest_.root_mtime_ns, 0, {}});
  table::BuildOptions bo;
  bo.local_root = data_root_;
  if (cache_.capacity() > 0) bo.cache_root = cfg_.local_dir + "/cache";
  // A device number of our own, stable for the dataset, so st_dev never matches a real disk.
  bo.dev = makedev(0xf5, static_cast<unsigned>(manifest_.dataset_id & 0xfffff));
  bo.dataset_id = manifest_.dataset_id;
  bo.uid = ::getuid();
  bo.gid = ::getgid();
  char buf[PATH_MAX];
  if (::realpath(cfg_.dataset.c_str(), buf)) bo.dataset = buf;
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) bo.tool.assign(buf, static_cast<size_t>(n));
  std::vector<uint32_t> entry_of;
  auto image = table::Build(std::move(nodes), bo, &entry_of);
  if (!image.ok()) return image.status().Prefixed("metadata table");
  // The agent's own view of the table answers its opens by path: the shard and entry of every
  // file by table entry (and, for lazy unpack, the table entry of each file to mark later).
  table_image_ = std::move(image).value();
  FS_RETURN_IF_ERROR(view_.Attach(table_image_));
  file_refs_.assign(view_.size(), FileRef{UINT32_MAX, 0, false});
  for (uint32_t s = 0, k = 0; s < index_.size(); s++)
    for (uint32_t i = 0; i < index_[s].size(); i++, k++) {
      if (index_[s][i].type != EntryType::kFile) continue;
      file_refs_[entry_of[k]] = FileRef{s, i, local_shard_[s]};
      if (lazy_ && local_shard_[s]) table_index_[s][i] = entry_of[k];
    }
  // Every directory of the namespace exists under the data root, so that directory
  // descriptors and working directories inside the mount have a real directory behind them.
  for (const auto& shard : index_)
    for (const auto& e : shard)
      if (e.type == EntryType::kDir) FS_RETURN_IF_ERROR(MakeDirs(data_root_fd_.get(), e.path, 0700));
  return Status::OK();
}

Status Agent::PublishTable() {
  const std::string path = cfg_.run_dir + "/" + kTableName;
  client_counters_ = table::MapCounters(cfg_.run_dir, /*create=*/true);
  if (!client_counters_) LOG_WARN("client counters unavailable: %s", std::strerror(errno));
  FS_RETURN_IF_ERROR(table::WriteFile(path, table_image_));
  return alive_.Acquire(path);
}

Status Agent::Start() {
  auto b = MakeBootstrap(cfg_.bootstrap);
  if (!b.ok()) return b.status().Prefixed("bootstrap");
  boot_ = std::move(b).value();
  // "%r" in the directories becomes the rank: several agents on one machine (tests, benchmarks).
  for (std::string* dir : {&cfg_.local_dir, &cfg_.run_dir})
    for (size_t p; (p = dir->find("%r")) != std::string::npos;) dir->replace(p, 2, std::to_string(boot_->rank()));
  // Every agent takes part in both rounds of the exchange, even after a failure, so that no
  // peer waits forever and every node learns which node failed and why.
  Status st = StageAndPublish(Prepare());
  if (!st.ok()) {
    // Nothing half-made stays behind: only status.json, for the launcher to read.
    serving_ = false;
    peer_server_.Stop();
    server_.Stop();
    RemoveOwnFiles(/*keep_status=*/true);
    WriteStatus("failed", st.ToString());
    return st;
  }
  // Warm the cache: stream every remote shard that fits, in the background, starting at a
  // rank-dependent shard so that agents spread their requests over the holders.
  for (uint32_t k = 0; k < manifest_.shards.size(); k++) {
    uint32_t s = static_cast<uint32_t>((k + boot_->rank() * manifest_.shards.size() / boot_->size()) % manifest_.shards.size());
    if (!local_shard_[s]) MaybePrefetch(s);
  }
  const std::string staged = lazy_ ? HumanBytes(static_cast<double>(read_bytes_)) + " of shards copied, files unpacked in the background"
                                   : HumanBytes(staged_bytes_) + " staged (" + std::to_string(staged_files_.load()) + " files)";
  LOG_INFO("ready: %s, in %.2f s, metadata exchange %.3f s (%s from %u agents), mount %s", staged.c_str(), stage_seconds_.load(),
           exchange_seconds_, HumanBytes(exchange_bytes_).c_str(), boot_->size(), cfg_.mount.c_str());
  if (lazy_) unpacker_ = std::thread([this] { UnpackLoop(); });
  else unpacked_ = true;
  WriteStatus("ready", "");
  return Status::OK();
}

void Agent::RemoveOwnFiles(bool keep_status) {
  auto remove = [](const std::string& path) {
    Status s = RemoveTree(path);
    if (!s.ok()) LOG_ERROR("%s", s.ToString().c_str());
  };
  if (created_local_) {
    remove(cfg_.local_dir);
  } else if (have_local_) {
    for (const char* sub : {"/data", "/cache", "/shards"}) remove(cfg_.local_dir + sub);
  }
  if (created_run_ && !keep_status) {
    remove(cfg_.run_dir);
  } else if (have_run_) {
    for (const char* name : {kTableName, table::kCountersName, kSocketName}) ::unlink((cfg_.run_dir + "/" + name).c_str());
    if (!keep_status) ::unlink((cfg_.run_dir + "/" + kStatusName).c_str());
  }
}

void Agent::Shutdown() {
  unpack_stop_ = true;
  if (unpacker_.joinable()) unpacker_.join();
  {
    std::lock_guard<std::mutex> l(prefetch_mu_);
    prefetch_stop_ = true;
  }
  prefetch_cv_.notify_all();
  if (prefetcher_.joinable()) prefetcher_.join();
  server_.Stop();
  peer_server_.Stop();
  if (boot_) boot_->Finalize();
  RemoveOwnFiles(/*keep_status=*/false);
}

Reply Agent::Handle(proto::Op op, const std::string& payload) {
  switch (op) {
    case proto::kStatus: return Reply{0, StatusJson(), -1};
    case proto::kStats: return Reply{0, StatsJson(), -1};
    case proto::kOpen: return Open(payload);
  }
  return Reply{EINVAL, "", -1};
}

Reply Agent::Open(const std::string& path) {
  {
    std::lock_guard<std::mutex> l(state_mu_);
    if (state_ != "ready") return Reply{EAGAIN, "", -1};
  }
  const table::Entry* te = view_.Lookup(path);
  const FileRef* found = te ? &file_refs_[view_.IndexOf(*te)] : nullptr;
  if (!found || found->shard == UINT32_MAX) return Reply{ENOENT, "", -1};
  const FileRef& ref = *found;
  if (ref.local) {
    if (lazy_ && !unpacked_) {
      Status st = EnsureUnpacked(ref.shard, ref.entry);
      if (!st.ok()) {
        open_errors_++;
        LOG_ERROR("open %s: %s", path.c_str(), st.ToString().c_str());
        return Reply{st.ToErrno(), "", -1};
      }
    }
    int fd = ::open((data_root_ + "/" + path).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      open_errors_++;
      return Reply{errno, "", -1};
    }
    opens_local_++;
    return Reply{0, "", fd};
  }
  auto fd = RemoteOpen(ref);
  if (!fd.ok()) {
    open_errors_++;
    LOG_ERROR("open %s: %s", path.c_str(), fd.status().ToString().c_str());
    return Reply{fd.status().ToErrno(), "", -1};
  }
  return Reply{0, "", *fd};
}

int Agent::ServeLocal(uint32_t shard, uint32_t entry, int* fd, uint64_t* size) {
  if (!serving_.load(std::memory_order_acquire)) return EAGAIN;  // only a confused peer asks this early
  if (shard >= index_.size() || !local_shard_[shard] || entry >= index_[shard].size()) return ENOENT;
  const IndexEntry& e = index_[shard][entry];
  if (e.type != EntryType::kFile) return EINVAL;
  if (lazy_ && !unpacked_) {
    Status st = EnsureUnpacked(shard, entry);
    if (!st.ok()) {
      LOG_ERROR("serve %s to a peer: %s", e.path.c_str(), st.ToString().c_str());
      return EIO;
    }
  }
  *fd = ::open((data_root_ + "/" + e.path).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (*fd < 0) return errno;
  *size = e.size;
  return 0;
}

std::vector<uint32_t> Agent::ShardFiles(uint32_t shard) {
  std::vector<uint32_t> out;
  if (!serving_.load(std::memory_order_acquire) || shard >= index_.size() || !local_shard_[shard]) return out;
  for (uint32_t i = 0; i < index_[shard].size(); i++)
    if (index_[shard][i].type == EntryType::kFile) out.push_back(i);
  return out;
}

bool Agent::ClaimUnpack(uint32_t shard, uint32_t entry, bool wait) {
  std::unique_lock<std::mutex> l(unpack_mu_);
  uint8_t& state = unpack_state_[shard][entry];
  if (wait) unpack_cv_.wait(l, [&] { return state != kBusy; });
  if (state != kPacked) return false;
  state = kBusy;
  return true;
}

void Agent::FinishUnpack(uint32_t shard, uint32_t entry, bool ok) {
  if (ok) {
    // The file is complete: from now on clients open it themselves.
    alive_.MarkLocal(table_index_[shard][entry]);
    staged_files_++;
    staged_bytes_ += index_[shard][entry].size;
  } else {
    (void)::unlinkat(data_root_fd_.get(), index_[shard][entry].path.c_str(), 0);
  }
  {
    std::lock_guard<std::mutex> l(unpack_mu_);
    unpack_state_[shard][entry] = ok ? kDone : kPacked;
  }
  unpack_cv_.notify_all();
}

Status Agent::EnsureUnpacked(uint32_t shard, uint32_t entry) {
  if (!ClaimUnpack(shard, entry, /*wait=*/true)) {
    std::lock_guard<std::mutex> l(unpack_mu_);
    return unpack_state_[shard][entry] == kDone ? Status::OK() : Status::IOError("unpack failed");
  }
  const IndexEntry& e = index_[shard][entry];
  const format::ShardFile& copy = *copies_[shard];
  Status st;
  {
    auto fd = stage::CreateStaged(data_root_fd_.get(), data_root_, e.path);
    st = fd.ok() ? format::StreamFrame(copy.fd.get(), copy.path, e, &dict_,
                                       [&](std::string_view piece) { return WriteFull(fd->get(), piece.data(), piece.size(), data_root_ + "/" + e.path); })
                 : fd.status();
  }
  FinishUnpack(shard, entry, st.ok());
  if (st.ok()) unpacked_on_demand_++;
  return st;
}

// Unpacks the local shard copies into the data root, at low priority (the job's own processes
// come first; a file they open before its turn is unpacked for them on the spot), then removes
// the copies.
void Agent::UnpackLoop() {
  auto t0 = Clock::now();
  LowerThreadPriority();
  // Tests hold the background pass back to exercise unpacking on first open.
  if (const char* d = std::getenv("FANSTORE_TEST_UNPACK_DELAY_MS"))
    for (long ms = std::strtol(d, nullptr, 10); ms > 0 && !unpack_stop_; ms -= 10) ::usleep(10000);
  bool ok = true;
  {
    ThreadPool workers(pool_->size());
    format::DecoderPool decoders(&dict_);
    for (uint32_t s = 0; s < copies_.size() && !unpack_stop_; s++) {
      if (!copies_[s]) continue;
      const format::ShardFile& copy = *copies_[s];
      format::ScanOptions so;
      so.pool = &workers;
      so.check_file_hash = true;
      so.expect_file_xxh3 = manifest_.shards[s].xxh3;
      // A large file goes to disk as it is decoded: memory stays bounded whatever its size.
      so.dict = &dict_;
      so.stream = [&](const IndexEntry& e, const format::DecodeFn& decode) -> Status {
        if (unpack_stop_) return Status::Aborted("shutting down");
        const uint32_t i = static_cast<uint32_t>(&e - copy.entries.data());
        if (!ClaimUnpack(s, i, /*wait=*/false)) return Status::OK();  // the scan drops its bytes
        Status fs = stage::WriteStagedStream(data_root_fd_.get(), data_root_, e, decode);
        FinishUnpack(s, i, fs.ok());
        return fs;
      };
      Status st = format::ScanShard(copy, so, [&](const IndexEntry& e, std::string_view stored) -> Status {
        if (unpack_stop_) return Status::Aborted("shutting down");
        if (e.type != EntryType::kFile) return Status::OK();
        LowerThreadPriority();
        const uint32_t i = static_cast<uint32_t>(&e - copy.entries.data());
        if (!ClaimUnpack(s, i, /*wait=*/false)) return Status::OK();
        std::string_view data;
        Status fs = decoders.Get()->Decode(e, stored, nullptr, &data);
        if (fs.ok()) fs = stage::WriteStaged(data_root_fd_.get(), data_root_, e, data);
        FinishUnpack(s, i, fs.ok());
        return fs;
      });
      if (!st.ok()) {
        ok = false;
        if (!unpack_stop_) LOG_ERROR("background unpack of shard %u: %s; its files are unpacked when opened", s, st.ToString().c_str());
      }
    }
  }
  if (!ok || unpack_stop_) return;
  // Every file is in place (a file claimed by an opener when the scan passed it is waited for).
  for (uint32_t s = 0; s < copies_.size(); s++)
    for (uint32_t i = 0; copies_[s] && i < index_[s].size(); i++)
      if (unpack_stop_ || (index_[s][i].type == EntryType::kFile && !EnsureUnpacked(s, i).ok())) return;
  unpack_seconds_ = Since(t0);
  unpacked_ = true;
  // Nobody reads the copies any more: every file's state is kDone.
  for (auto& c : copies_)
    if (c) {
      c->fd.Reset();
      (void)::unlink(c->path.c_str());
    }
  (void)::rmdir(copy_dir_.c_str());
  LOG_INFO("unpacked %llu files in %.2f s after ready (%llu of them on first open)",
           static_cast<unsigned long long>(staged_files_.load()), unpack_seconds_.load(),
           static_cast<unsigned long long>(unpacked_on_demand_.load()));
  std::string state, error;
  {
    std::lock_guard<std::mutex> l(state_mu_);
    state = state_;
    error = error_;
  }
  WriteStatus(state, error);
}

void Agent::MaybePrefetch(uint32_t shard) {
  if (!cfg_.prefetch || !cfg_.peers || boot_->size() < 2) return;
  std::lock_guard<std::mutex> l(prefetch_mu_);
  if (prefetch_stop_ || prefetch_seen_[shard]) return;
  prefetch_seen_[shard] = true;
  // Only what fits without evicting anything: prefetch must never push out files in use.
  if (shard_raw_bytes_[shard] > cache_.free_bytes()) return;
  prefetch_queue_.push_back(shard);
  if (!prefetcher_.joinable()) prefetcher_ = std::thread([this] { PrefetchLoop(); });
  prefetch_cv_.notify_one();
}

void Agent::PrefetchLoop() {
  while (true) {
    uint32_t shard;
    {
      std::unique_lock<std::mutex> l(prefetch_mu_);
      prefetch_cv_.wait(l, [&] { return prefetch_stop_ || !prefetch_queue_.empty(); });
      if (prefetch_stop_) return;
      shard = prefetch_queue_.front();
      prefetch_queue_.erase(prefetch_queue_.begin());
    }
    const auto& entries = index_[shard];
    auto holders = Holders(shard, boot_->size(), replicas_);
    for (size_t k = 0; k < holders.size(); k++) {
      uint32_t h = holders[(boot_->rank() + shard + k) % holders.size()];
      if (h == boot_->rank()) continue;
      bool full = false, skip = false;
      FileCache::Pending pending;  // the file being received, written as its pieces arrive
      Xxh3Stream hash;
      Status st = peers_.FetchShard(
          h, shard,
          [&](uint32_t i) -> std::optional<uint64_t> {
            if (i < entries.size() && entries[i].type == EntryType::kFile) return entries[i].size;
            return std::nullopt;
          },
          [&](uint32_t i, uint64_t off, std::string_view piece) {
            const IndexEntry& e = entries[i];
            if (prefetch_stop_) return false;
            if (off == 0) {
              // A file the job opened before the stream reached it is cached already: its
              // bytes are read off the connection, not written again.
              const uint64_t key = Xxh3(e.path);
              if ((skip = cache_.Has(key))) return true;
              hash = Xxh3Stream();
              if (!cache_.Begin(key, e.size, /*evict=*/false, &pending).ok()) return !(full = true);
            }
            if (skip) return true;
            hash.Update(piece.data(), piece.size());
            if (!WriteFull(pending.fd.get(), piece.data(), piece.size(), "cache").ok()) return !(full = true);
            if (off + piece.size() < e.size) return true;
            if (hash.Digest() != e.xxh3) return false;
            if (!cache_.Commit(&pending, /*want_fd=*/false).ok()) return !(full = true);
            prefetched_files_++;
            prefetched_bytes_ += e.size;
            return true;
          });
      if (pending.active) cache_.Abort(&pending);
      if (st.ok()) prefetched_shards_++;
      if (st.ok() || full || prefetch_stop_) break;
      LOG_WARN("prefetch of shard %u from rank %u: %s", shard, h, st.ToString().c_str());
    }
  }
}

struct Agent::Inflight {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

Result<int> Agent::RemoteOpen(const FileRef& ref) {
  const uint64_t key = Xxh3(index_[ref.shard][ref.entry].path);
  const uint64_t size = index_[ref.shard][ref.entry].size;
  MaybePrefetch(ref.shard);
  while (true) {
    int fd = cache_.Open(key);
    if (fd >= 0) {
      opens_cached_++;
      bytes_cached_ += size;
      return fd;
    }
    // One fetch per file: later openers wait for the first, then take it from the cache.
    std::shared_ptr<Inflight> wait, mine;
    {
      std::lock_guard<std::mutex> l(inflight_mu_);
      auto [it, fresh] = inflight_.emplace(key, nullptr);
      if (fresh) it->second = mine = std::make_shared<Inflight>();
      else wait = it->second;
    }
    if (wait) {
      std::unique_lock<std::mutex> l(wait->mu);
      wait->cv.wait(l, [&] { return wait->done; });
      if (cache_.capacity() > 0) continue;  // cached by the first opener, unless it failed
    }
    auto finish = [&] {
      if (!mine) return;
      {
        std::lock_guard<std::mutex> l(inflight_mu_);
        inflight_.erase(key);
      }
      std::lock_guard<std::mutex> l(mine->mu);
      mine->done = true;
      mine->cv.notify_all();
    };
    // The file goes straight into a cache file, or, when the cache cannot hold it (or writing
    // it fails), into a sealed memfd: never whole into the agent's memory.
    FileCache::Pending pending;
    if (cache_.Begin(key, size, /*evict=*/true, &pending).ok()) {
      bool local_error = false;
      Status st = FetchInto(ref, pending.fd.get(), &local_error);
      if (st.ok()) {
        auto cached = cache_.Commit(&pending, /*want_fd=*/true);
        finish();
        if (cached.ok()) return cached;
        LOG_WARN("cache %s: %s; serving it from memory", index_[ref.shard][ref.entry].path.c_str(),
                 cached.status().ToString().c_str());
      } else {
        cache_.Abort(&pending);
        if (!local_error) {
          finish();
          return st;
        }
        LOG_WARN("%s; serving it from memory", st.ToString().c_str());
      }
    }
    UniqueFD mfd(::memfd_create("fanstore", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!mfd.valid()) {
      finish();
      return Status::FromErrno("memfd_create", errno);
    }
    bool local_error = false;
    Status st = FetchInto(ref, mfd.get(), &local_error);
    finish();
    if (!st.ok()) return st;
    ::fcntl(mfd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
    ::lseek(mfd.get(), 0, SEEK_SET);
    return mfd.Release();
  }
}

// Writes the file's verified content to `out`, from a holder (replicas in an order that spreads
// load), then from the dataset directory; `out` is rewound before every attempt. A failure to
// write `out` ends the attempts and sets *local_error.
Status Agent::FetchInto(const FileRef& ref, int out, bool* local_error) {
  const IndexEntry& e = index_[ref.shard][ref.entry];
  Status write_status;
  bool written = false;  // by an earlier attempt: `out` must be emptied before the next
  auto sink = [&](std::string_view piece) {
    written = true;
    write_status = WriteFull(out, piece.data(), piece.size(), "the copy of '" + e.path + "'");
    return write_status;
  };
  auto rewind = [&] {
    if (!written || (::ftruncate(out, 0) == 0 && ::lseek(out, 0, SEEK_SET) == 0)) {
      written = false;
      return true;
    }
    write_status = Status::FromErrno("rewind the copy of '" + e.path + "'", errno);
    *local_error = true;
    return false;
  };
  const uint32_t size = boot_->size();
  auto holders = Holders(ref.shard, size, replicas_);
  if (cfg_.peers && size > 1) {
    const size_t n = holders.size();
    for (size_t k = 0; k < n; k++) {
      uint32_t h = holders[(ref.entry + boot_->rank() + k) % n];
      if (h == boot_->rank() || peers_.IsDown(h)) continue;  // a down peer was counted once
      if (!rewind()) return write_status;
      Xxh3Stream hash;
      write_status = Status::OK();
      Status st = peers_.Fetch(h, ref.shard, ref.entry, e.size, [&](std::string_view piece) {
        hash.Update(piece.data(), piece.size());
        return sink(piece);
      });
      if (!write_status.ok()) {
        *local_error = true;
        return write_status;
      }
      if (st.ok() && hash.Digest() != e.xxh3)
        st = Status::Corruption("peer " + std::to_string(h) + " sent bad bytes for '" + e.path + "'");
      if (st.ok()) {
        opens_remote_++;
        bytes_remote_ += e.size;
        return st;
      }
      peer_errors_++;
      LOG_WARN("fetch '%s' from rank %u: %s; trying %s", e.path.c_str(), h, st.ToString().c_str(),
               k + 1 < n ? "another replica" : "the dataset directory");
    }
  }
  if (!rewind()) return write_status;
  write_status = Status::OK();
  Status st = ReadFromDataset(ref, sink);
  if (!write_status.ok()) {
    *local_error = true;
    return write_status;
  }
  if (st.ok()) {
    opens_fallback_++;
    bytes_fallback_ += e.size;
  }
  return st;
}

// The file's frame read from its shard on the parallel file system (sequential preads at the
// frame's offset), decoded and verified as a stream. Bad bytes are never served: the caller
// drops what the sink got and turns the error into EIO.
Status Agent::ReadFromDataset(const FileRef& ref, const std::function<Status(std::string_view)>& sink) {
  const IndexEntry& e = index_[ref.shard][ref.entry];
  const std::string shard_path = cfg_.dataset + "/" + manifest_.shards[ref.shard].file;
  int shard_fd;
  {
    std::lock_guard<std::mutex> l(shard_fd_mu_);
    auto it = shard_fds_.find(ref.shard);
    if (it == shard_fds_.end()) {
      int fd = ::open(shard_path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Status::FromErrno("open " + shard_path, errno);
      it = shard_fds_.emplace(ref.shard, fd).first;
    }
    shard_fd = it->second;
  }
  source_slots_.acquire();
  const int now = ++source_in_flight_;
  for (int peak = source_peak_.load(); now > peak && !source_peak_.compare_exchange_weak(peak, now);) {
  }
  ScopeExit release([this] {
    source_in_flight_--;
    source_slots_.release();
  });
  return format::StreamFrame(shard_fd, shard_path, e, &dict_, sink);
}

}  // namespace fanstore::agent
