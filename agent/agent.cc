// The agent's lifecycle (see agent.h for its other roles).
#include "agent/agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "agent/exchange.h"
#include "agent/peer_wire.h"
#include "agent/placement.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/io.h"
#include "common/log.h"
#include "common/private_dir.h"
#include "stage/stage.h"

namespace fanstore::agent {
namespace {

// The directory holds nothing: the agent owns what is in it and removes it at the end.
Status CheckEmpty(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Status::FromErrno("local directory " + dir, errno);
  int count = 0;
  while (struct dirent* de = ::readdir(d))
    count += std::strcmp(de->d_name, ".") && std::strcmp(de->d_name, "..");
  ::closedir(d);
  if (count) return Status::InvalidArgument("local directory " + dir + " is not empty");
  return Status::OK();
}

std::vector<const format::ShardFile*> Pointers(
    const std::vector<std::unique_ptr<format::ShardFile>>& shards) {
  std::vector<const format::ShardFile*> out;
  for (const auto& sh : shards) out.push_back(sh.get());
  return out;
}

}  // namespace

Agent::Agent(Config cfg) : cfg_(std::move(cfg)) {}

void Agent::WriteStatus(AgentState state, const std::string& error) {
  std::lock_guard<std::mutex> w(status_write_mu_);
  {
    std::lock_guard<std::mutex> l(state_mu_);
    state_ = state;
    error_ = error;
  }
  if (!have_run_) return;
  Status s = WriteFileAtomic(cfg_.run_dir + "/" + kStatusName, StatusJson() + "\n", 0600);
  if (!s.ok()) LOG_ERROR("%s", s.ToString().c_str());
}

Status Agent::Prepare() {
  FS_RETURN_IF_ERROR(EnsureOwnDir(cfg_.run_dir, &created_run_));
  have_run_ = true;
  // Held until exit: readers of status.json tell a dead agent from a live one by it.
  auto alive = run_dir::HoldAlive(cfg_.run_dir);
  if (!alive.ok()) return alive.status();
  alive_lock_ = std::move(alive).value();
  Status output = StartOutput();  // before the ticker, which reads drainer_
  WriteStatus(AgentState::kStarting, "");
  StartTicker();
  FS_RETURN_IF_ERROR(output);
  if (!cfg_.dataset.empty()) FS_RETURN_IF_ERROR(PrepareStaging());
  return server_.Start(cfg_.run_dir + "/" + kSocketName,
                       [this](proto::Op op, const std::string& p, UniqueFD passed) {
                         return Handle(op, p, std::move(passed));
                       });
}

Status Agent::PrepareStaging() {
  FS_RETURN_IF_ERROR(EnsureOwnDir(cfg_.local_dir, &created_local_).Prefixed("local directory"));
  have_local_ = true;
  FS_RETURN_IF_ERROR(CheckEmpty(cfg_.local_dir));
  if (::access(cfg_.local_dir.c_str(), W_OK) != 0)
    return Status::FromErrno("local directory " + cfg_.local_dir + " is not writable", errno);
  data_root_ = cfg_.local_dir + "/data";
  for (const std::string& d : {data_root_, cfg_.local_dir + "/cache"})
    if (::mkdir(d.c_str(), 0700) != 0)
      return Status::FromErrno("local directory: create " + d, errno);
  data_root_fd_.Reset(::open(data_root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!data_root_fd_.valid()) return Status::FromErrno("open " + data_root_, errno);
  auto m = format::LoadManifest(cfg_.dataset);
  if (!m.ok()) return m.status();
  manifest_ = std::move(m).value();
  FS_RETURN_IF_ERROR(dict_.Load(cfg_.dataset, manifest_.dict));
  pool_ = std::make_unique<ThreadPool>(cfg_.threads ? cfg_.threads : ThreadPool::DefaultThreads());
  return Status::OK();
}

// Tests hold the agent at a phase (FANSTORE_TEST_PAUSE=staging:MS or exchange:MS) to kill it or
// its peer there; the log line tells them it got there.
void Agent::TestPause(const std::string& phase) {
  const char* v = std::getenv(env::kTestPause);
  if (!v || std::strncmp(v, phase.c_str(), phase.size()) != 0 || v[phase.size()] != ':') return;
  LOG_WARN("test pause: %s", phase.c_str());
  for (long ms = std::strtol(v + phase.size() + 1, nullptr, 10); ms > 0 && !stop_requested_;
       ms -= 10)
    ::usleep(10000);
}

void Agent::Cancel() {
  stop_requested_ = true;
  stage_abort_ = true;
}

Status Agent::StartPeerService() {
  if (boot_->size() < 2 || !cfg_.peers) return Status::OK();
  peer_pool_ = std::make_unique<ThreadPool>(8);
  peer_stream_pool_ = std::make_unique<ThreadPool>(PeerServer::kStreamThreads);
  const PeerIdentity me{wire::JobKey(boot_->nspace(), cfg_.job_id), boot_->rank(), boot_->size()};
  remote_.peers().SetIdentity(me);
  auto addr = PeerListenAddress(cfg_.peer_addr);
  if (!addr.ok()) return addr.status();
  return peer_server_.Start(
      *addr, me,
      [this](uint32_t s, uint32_t e, int* fd, uint64_t* n) { return ServeLocal(s, e, fd, n); },
      [this](uint32_t s) { return ShardFiles(s); }, peer_pool_.get(), peer_stream_pool_.get(),
      [this](uint32_t r, int ms, std::shared_ptr<const std::string>* m) {
        return gather_.Wait(r, ms, m);
      });
}

bool Agent::IsPrimary(uint32_t shard) const {
  return Holders(shard, boot_->size(), replicas_)[0] == boot_->rank();
}

bool Agent::LargeExchange() const {
  std::vector<uint64_t> files(boot_->size());
  for (uint32_t s = 0; s < manifest_.shards.size(); s++)
    files[Holders(s, boot_->size(), replicas_)[0]] += manifest_.shards[s].files;
  return *std::max_element(files.begin(), files.end()) > kFenceMaxFiles;
}

bool Agent::GatherOverPeers(bool large) const {
  const char* via = std::getenv(env::kExchangeVia);
  return boot_->size() > 1 && cfg_.peers && !(via && std::string_view(via) == "pmix") &&
         (large || manifest_.files > kGatherMinFiles);
}

std::vector<uint64_t> Agent::MessageBounds() const {
  std::vector<uint64_t> bound(boot_->size(), 64 << 10);  // head and endpoint
  for (uint32_t s = 0; s < manifest_.shards.size(); s++)
    bound[Holders(s, boot_->size(), replicas_)[0]] += manifest_.shards[s].bytes + 128;
  return bound;
}

std::string Agent::ExchangeMessage(const Shards& shards) {
  // Every agent publishes the indexes of the shards it is primary for.
  std::vector<exchange::Published> primary;
  for (const auto& sh : shards) {
    const uint32_t id = sh->header.shard_id;
    if (IsPrimary(id)) primary.push_back({sh.get(), &own_links_[id]});
  }
  return exchange::Encode(boot_->size() > 1 && cfg_.peers ? peer_server_.Endpoint() : "", primary);
}

template <typename Round>
auto Agent::InExchange(Round round) {
  exchange_entered_ns_ = SteadyNs();
  ScopeExit left([this] { exchange_entered_ns_ = 0; });
  return round();
}

Status Agent::ExchangeIndexes(Status st, std::string message, const Result<Shards>& shards,
                              bool* fenced) {
  if (!st.ok()) stage_abort_ = true;
  auto t0 = SteadyClock::now();
  const bool large = LargeExchange();
  const bool gather = st.ok() && GatherOverPeers(large);
  exchange_via_ = boot_->size() < 2 ? "" : gather ? "peers" : large ? "pmix" : "fence";
  if (gather) {
    gather_.Begin(boot_->rank(), boot_->size(), std::move(message));
    message = exchange::EncodePointer(peer_server_.Endpoint(), gather_.mine());
  }
  auto all = InExchange([&]() -> Result<std::vector<std::string>> {
    TestPause("exchange");
    auto got = boot_->Exchange(st.ok() ? std::move(message) : exchange::EncodeHead(st), fenced,
                               !gather && large);
    if (!gather || !got.ok() || !st.ok()) return got;
    auto pointers = exchange::ReadPointers(*got);
    if (!pointers.ok()) return pointers.status();
    std::vector<std::string> endpoints;
    for (const auto& p : *pointers) endpoints.push_back(p ? p->endpoint : "");
    remote_.peers().SetEndpoints(std::move(endpoints));
    FS_RETURN_IF_ERROR(gather_.Run(&remote_.peers(), *pointers, &*got, MessageBounds()));
    LOG_INFO("metadata exchange: every agent's indexes gathered over the peer service in %.2f s",
             SecondsSince(t0));
    return std::vector<std::string>();
  });
  exchange_seconds_ = SecondsSince(t0);
  FS_RETURN_IF_ERROR(st);
  if (!all.ok()) return all.status().Prefixed("metadata exchange");
  exchanged_ = std::move(all).value();
  std::vector<std::string_view> views =
      gather ? gather_.Views()
             : std::vector<std::string_view>(exchanged_.begin(), exchanged_.end());
  auto d = exchange::Decode(views, static_cast<uint32_t>(manifest_.shards.size()), boot_->rank(),
                            Pointers(*shards));
  if (!d.ok()) return d.status();
  exchange_bytes_ = d->bytes;
  decoded_ = std::move(d).value();  // its views into exchanged_ stay valid
  links_ = std::move(decoded_.links);
  remote_.peers().SetEndpoints(std::move(decoded_.endpoints));
  return Status::OK();
}

Status Agent::AgreeAllStaged(const Status& st) {
  auto verdicts =
      InExchange([&] { return boot_->Exchange(exchange::EncodeHead(st), nullptr, false); });
  // The last use of PMIx. An agent that dies later must die as a finalized client: Slurm's
  // PMIx server kills the whole step, every other agent with it, when a client that did not
  // finalize goes away (its error handler, seen at 64 nodes; slurm_wide).
  boot_->Finalize();
  gather_.End();  // every agent has its messages: each is in this round
  if (!st.ok()) return st;
  if (!verdicts.ok()) return verdicts.status().Prefixed("metadata exchange");
  for (uint32_t r = 0; r < verdicts->size(); r++)
    FS_RETURN_IF_ERROR(exchange::CheckHead((*verdicts)[r], r));
  return Status::OK();
}

void Agent::InitRoles() {
  RemoteFiles::Context rc;
  rc.index = &index_;
  rc.manifest = &manifest_;
  rc.dict = &dict_;
  rc.dataset = cfg_.dataset;
  rc.rank = boot_->rank();
  rc.size = boot_->size();
  rc.replicas = replicas_;
  rc.peers = cfg_.peers;
  rc.prefetch = cfg_.prefetch;
  rc.prefetch_streams = cfg_.prefetch_streams;
  if (rc.prefetch_streams == 0) {
    // Each stream's receiving side keeps about one core busy (docs/benchmarks.md, C1): a second
    // one where the job was given 16 cores or more. Holders serve PeerServer::kStreamThreads
    // streams at once, so the average load of every holder stays below that.
    cpu_set_t cpus;
    const int n = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    rc.prefetch_streams = static_cast<uint32_t>(std::clamp(n / 8, 1, 2));
  }
  remote_.Init(std::move(rc), cfg_.local_dir + "/cache", CacheCapacity());
  if (!lazy_) return;
  Unpacker::Context uc;
  uc.index = &index_;
  uc.dict = &dict_;
  uc.manifest = &manifest_;
  uc.data_root_fd = data_root_fd_.get();
  uc.data_root = data_root_;
  uc.copy_dir = copy_dir_;
  uc.threads = pool_->size();
  uc.on_file = [this](uint32_t table_entry, uint64_t bytes) {
    alive_.MarkLocal(table_entry);  // from now on clients open it themselves
    staged_files_++;
    staged_bytes_ += bytes;
  };
  uc.on_done = [this] {
    cpu_unpacked_ = CpuSeconds();
    AgentState state;
    std::string error;
    {
      std::lock_guard<std::mutex> l(state_mu_);
      state = state_;
      error = error_;
    }
    WriteStatus(state, error);
  };
  unpacker_.Init(std::move(uc), mine_);
}

Status Agent::StageAndPublish(Status st) {
  const uint32_t nshards = static_cast<uint32_t>(manifest_.shards.size());
  replicas_ = cfg_.replicas == 0 ? boot_->size() : cfg_.replicas;
  mine_ = ShardsOf(boot_->rank(), nshards, boot_->size(), replicas_);
  local_shard_.assign(nshards, false);
  for (uint32_t s : mine_) local_shard_[s] = true;

  // 1. The shards are opened and the share checked; the staging runs in the background.
  Result<Shards> shards = Status::Aborted("not opened");
  if (st.ok()) st = OpenAndPlan(&shards);
  // Files held here are served to the other agents once every agent is ready.
  if (st.ok()) st = StartPeerService();
  std::string message;
  if (st.ok()) message = ExchangeMessage(*shards);
  // The indexes we publish are in the message: the table is built from it. Those of the
  // shards another agent publishes are kept for the build (Decode).
  std::vector<exchange::Links>().swap(own_links_);
  if (shards.ok())
    for (auto& sh : *shards)
      if (IsPrimary(sh->header.shard_id)) std::string().swap(sh->index_stored);
  // Eager unpack reads the entries as it stages (parsed at open; again after a fallback from
  // lazy). Lazy mode copies the shards as they are, and decodes each index again only when it
  // unpacks that shard: no entries beside the table; nor does the image's blob, which decodes
  // them a shard at a time as it writes it.
  if (st.ok() && !lazy_) {
    for (auto& sh : *shards)
      if (st.ok() && !image_ && !sh->parsed()) st = format::ReadIndex(sh.get());
    if (st.ok()) st = StageAsync(&*shards);  // with image_, the blob
  }

  // 2. The indexes are exchanged and the table built while the shards are staged: the
  // staging is bound by the source, the table by one core.
  bool fenced = false;
  st = ExchangeIndexes(st, std::move(message), shards, &fenced);
  if (st.ok() && !stop_requested_) {
    st = BuildTable();
    if (st.ok()) InitRoles();
    // The image's tree is written from the table once its blob is written, and the image
    // mounted before the table is published.
    if (st.ok() && image_) st = StageImage(&*shards);
  }
  if (shards.ok())  // in the table now
    for (auto& sh : *shards) std::string().swap(sh->index_stored);
  if (st.ok() && !stop_requested_)
    st = PublishTable();  // clients use it once the status says ready
  if (!st.ok()) stage_abort_ = true;
  Status stage_st = StageWait();
  if (st.ok()) st = stop_requested_ ? Status::Aborted("stage-in cancelled") : stage_st;
  if (st.ok() && lazy_) {
    st = stage::UseCopies(*shards, copy_dir_);
    for (auto& sh : *shards) unpacker_.Adopt(std::move(sh));
  }
  // Peers may ask for files the moment the second round ends: everything they need is in
  // place before it starts.
  if (st.ok()) serving_.store(true, std::memory_order_release);
  if (!fenced) return st;  // the first round never met: no second round to wait for

  // 3. A second round tells every agent whether all of them staged their share, and if not
  // which failed and why; no agent reports ready unless every one can serve.
  return AgreeAllStaged(st);
}

Status Agent::PublishTable() {
  const std::string path = cfg_.run_dir + "/" + kTableName;
  client_counters_ = table::MapCounters(cfg_.run_dir, /*create=*/true);
  if (!client_counters_) LOG_WARN("client counters unavailable: %s", std::strerror(errno));
  if (::rename((cfg_.run_dir + "/" + kTableTmpName).c_str(), path.c_str()) != 0)
    return Status::FromErrno("table: rename to " + path, errno);
  return alive_.Acquire(table_image_.data(), table_image_.view().size());
}

Status Agent::Start() {
  auto b = MakeBootstrap(cfg_.bootstrap);
  if (!b.ok()) return b.status().Prefixed("bootstrap");
  boot_ = std::move(b).value();
  // "%r" in the directories becomes the rank: several agents on one machine (tests, benchmarks).
  for (std::string* dir : {&cfg_.local_dir, &cfg_.run_dir, &cfg_.output_dir})
    for (size_t p; (p = dir->find("%r")) != std::string::npos;)
      dir->replace(p, 2, std::to_string(boot_->rank()));
  if (cfg_.dataset.empty()) {  // output only: nothing to stage, exchange or serve
    Status st = Prepare();
    if (!st.ok()) return Fail(st);
    LOG_INFO("ready: output only, %s drained to %s", cfg_.output_dir.c_str(), cfg_.output.c_str());
    WriteStatus(AgentState::kReady, "");
    return Status::OK();
  }
  // Every agent takes part in both rounds of the exchange, even after a failure, so that no
  // peer waits forever and every node learns which node failed and why.
  Status st = StageAndPublish(Prepare());
  if (!st.ok()) return Fail(st);
  cpu_ready_ = CpuSeconds();  // before the prefetch and the unpack start
  // Warm the cache: stream every remote shard that fits, in the background, starting at a
  // rank-dependent shard so that agents spread their requests over the holders.
  const size_t nshards = manifest_.shards.size();
  for (uint32_t k = 0; k < nshards; k++) {
    uint32_t s = static_cast<uint32_t>((k + boot_->rank() * nshards / boot_->size()) % nshards);
    if (!local_shard_[s]) remote_.MaybePrefetch(s);
  }
  const std::string staged = lazy_ ? HumanBytes(static_cast<double>(read_bytes_)) +
                                         " of shards copied, files unpacked in the background"
                                   : HumanBytes(staged_bytes_) + " staged (" +
                                         std::to_string(staged_files_.load()) + " files)";
  LOG_INFO("ready: %s, in %.2f s, metadata exchange %.3f s (%s from %u agents), mount %s",
           staged.c_str(), stage_seconds_.load(), exchange_seconds_,
           HumanBytes(exchange_bytes_).c_str(), boot_->size(), cfg_.mount.c_str());
  if (lazy_) {
    unpacker_.Start();
  } else {
    cpu_unpacked_ = cpu_ready_.load();
    unpacker_.SetDone();
  }
  WriteStatus(AgentState::kReady, "");
  return Status::OK();
}

Status Agent::Fail(const Status& st) {
  // Nothing half-made stays behind: only status.json, for the launcher to read.
  serving_ = false;
  gather_.End();  // no request waits for a message any more
  peer_server_.Stop();
  server_.Stop();
  RemoveOwnFiles(/*keep_status=*/true);
  WriteStatus(AgentState::kFailed, st.ToString());
  return st;
}

void Agent::RemoveOwnFiles(bool keep_status) {
  // A million files take seconds to unlink: on every core (the job is over).
  auto remove = [](const std::string& path) {
    Status s = RemoveTree(path, ThreadPool::DefaultThreads());
    if (!s.ok()) LOG_ERROR("%s", s.ToString().c_str());
  };
  UnmountImage();
  if (have_local_ && cfg_.epilog_unmounts_local_dir && IsMountPoint(cfg_.local_dir)) {
    LOG_DEBUG("left %s to the epilog, which unmounts it", cfg_.local_dir.c_str());
  } else if (have_local_ && cfg_.leave_local_dir && ::getppid() == launcher_) {
    // A launcher that died (its death is what stops this agent: PR_SET_PDEATHSIG) removes
    // nothing: then the agent does, as without the option.
    LOG_DEBUG("left %s to the launcher, which removes it", cfg_.local_dir.c_str());
  } else if (created_local_) {
    remove(cfg_.local_dir);
  } else if (have_local_) {
    for (const char* sub : {"/data", "/cache", "/shards", "/image"}) remove(cfg_.local_dir + sub);
  }
  // Empty unless something did not drain: then it stays (FinishOutput named what is in it).
  if (created_output_) ::rmdir(cfg_.output_dir.c_str());
  if (created_run_ && !keep_status) {
    remove(cfg_.run_dir);
  } else if (have_run_) {
    for (const char* name : {kTableName, kTableTmpName, table::kCountersName, kSocketName})
      ::unlink((cfg_.run_dir + "/" + name).c_str());
    if (!keep_status) ::unlink((cfg_.run_dir + "/" + kStatusName).c_str());
  }
}

void Agent::Shutdown() {
  StopTicker();
  kernel_view_.Stop();  // its requests use the unpacker and the remote files
  unpacker_.Stop();
  remote_.Stop();
  server_.Stop();
  gather_.End();
  peer_server_.Stop();
  if (boot_) boot_->Finalize();
  RemoveOwnFiles(/*keep_status=*/false);
}

}  // namespace fanstore::agent
