// Bootstrap: the single-node case and the PMIx one.
#include "agent/bootstrap.h"

#include <pmix.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/env.h"
#include "common/log.h"

namespace fanstore::agent {
namespace {

class Single : public Bootstrap {
 public:
  uint32_t rank() const override { return 0; }
  uint32_t size() const override { return 1; }
  Result<std::vector<std::string>> Exchange(std::string mine, bool* fenced, bool) override {
    if (fenced) *fenced = true;
    std::vector<std::string> all(1);
    all[0] = std::move(mine);  // no copy
    return all;
  }
};

std::string PmixError(const char* what, pmix_status_t rc) {
  return std::string(what) + ": " + PMIx_Error_string(rc);
}

class Pmix : public Bootstrap {
 public:
  ~Pmix() override { Finalize(); }

  Status Init() {
    // The default store (gds ds21) fails above about 4 MB per value and takes the step's PMIx
    // server down with it; the hash store has no such limit (see SLURM-TESTBED.md). This picks
    // the client's; a launcher's server reads its own environment: Slurm's step daemon takes the
    // step's, which the plugin sets (AgentStepEnv).
    ::setenv(env::kPmixMcaGds, "hash", 1);
    pmix_status_t rc = PMIx_Init(&me_, nullptr, 0);
    if (rc != PMIX_SUCCESS) return Status::IOError(PmixError("PMIx_Init", rc));
    inited_ = true;
    pmix_proc_t wild;
    PMIX_PROC_LOAD(&wild, me_.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t* val = nullptr;
    rc = PMIx_Get(&wild, PMIX_JOB_SIZE, nullptr, 0, &val);
    if (rc != PMIX_SUCCESS || !val) return Status::IOError(PmixError("PMIx_Get(job size)", rc));
    size_ = val->type == PMIX_UINT32 ? val->data.uint32 : 0;
    PMIX_VALUE_RELEASE(val);
    if (size_ == 0 || me_.rank >= size_) return Status::IOError("PMIx: bad job size or rank");
    return Status::OK();
  }
  uint32_t rank() const override { return me_.rank; }
  uint32_t size() const override { return size_; }
  std::string nspace() const override { return me_.nspace; }

  // Small blobs travel in the fence (Slurm's ring, over its direct connections between nodes).
  // Large ones do not: each Get then fetches its value from the server of the node that
  // published it (direct modex). Slurm 22.05's ring deadlocks when two nodes forward big
  // contributions at once (each step daemon blocks in its send while the other's reader waits
  // for the lock that send holds), and its tree drops a late rank's data from the second fence
  // on; but each direct-modex message goes through slurmd, N-1 requests and replies per node
  // (docs/design.md, "PMIx fence"). Every round has the same fences whatever `large` says, and a
  // Get finds a value collected or not, so agents that disagree still meet.
  Result<std::vector<std::string>> Exchange(std::string mine, bool* fenced, bool large) override {
    if (fenced) *fenced = false;
    if (!inited_) return Status::IOError("PMIx: the agent finalized its session already");
    // A key per round: a Get after the next fence must not find the previous round's value.
    const std::string key = "fanstore.meta." + std::to_string(round_);
    if (round_ > 0) {
      // A fence or a direct-modex reply carries every value its agent still publishes: the
      // previous round's goes, once every agent has read it (the barrier), so that this round
      // moves only its own.
      FS_RETURN_IF_ERROR(Fence(false));
      FS_RETURN_IF_ERROR(Put("fanstore.meta." + std::to_string(round_ - 1), std::string()));
    }
    round_++;
    FS_RETURN_IF_ERROR(Put(key, std::move(mine)));
    pmix_status_t rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return Status::IOError(PmixError("PMIx_Commit", rc));
    FS_RETURN_IF_ERROR(Fence(!large));
    if (fenced) *fenced = true;
    return GetAll(key);
  }

  void Finalize() override {
    if (inited_) PMIx_Finalize(nullptr, 0);
    inited_ = false;
  }

 private:
  // Publishes `value` under `key` (taken: freed once PMIx has its own copy).
  Status Put(const std::string& key, std::string value) {
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = value.data();
    v.data.bo.size = value.size();
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);
    std::string().swap(value);
    return rc == PMIX_SUCCESS ? Status::OK() : Status::IOError(PmixError("PMIx_Put", rc));
  }
  // Every rank's value of `key`, fetched at once (each Get of another node's value is a round trip
  // to its server: one after the other, they would cost N of them).
  Result<std::vector<std::string>> GetAll(const std::string& key) {
    struct Gets {
      std::mutex mu;
      std::condition_variable done;
      uint32_t left = 0;
      std::vector<std::string> values;
      std::vector<pmix_status_t> rc;
    } gets;
    struct One {
      Gets* gets;
      uint32_t rank;
    };
    gets.values.resize(size_);
    gets.rc.assign(size_, PMIX_ERR_NOT_FOUND);
    gets.left = size_;
    std::vector<One> ones(size_);
    // On PMIx's thread; `kv` stays the library's.
    auto got = [](pmix_status_t rc, pmix_value_t* kv, void* arg) {
      auto* one = static_cast<One*>(arg);
      Gets& g = *one->gets;
      if (rc == PMIX_SUCCESS && !kv) rc = PMIX_ERR_NOT_FOUND;
      if (rc == PMIX_SUCCESS && kv->type == PMIX_BYTE_OBJECT && kv->data.bo.bytes)
        g.values[one->rank].assign(kv->data.bo.bytes, kv->data.bo.size);
      std::lock_guard<std::mutex> lock(g.mu);
      g.rc[one->rank] = rc;
      if (--g.left == 0) g.done.notify_all();
    };
    for (uint32_t r = 0; r < size_; r++) {
      ones[r] = {&gets, r};
      pmix_proc_t p;
      PMIX_PROC_LOAD(&p, me_.nspace, r);
      pmix_status_t rc = PMIx_Get_nb(&p, key.c_str(), nullptr, 0, got, &ones[r]);
      if (rc != PMIX_SUCCESS) {  // no callback comes
        std::lock_guard<std::mutex> lock(gets.mu);
        gets.rc[r] = rc;
        gets.left--;
      }
    }
    std::unique_lock<std::mutex> lock(gets.mu);
    gets.done.wait(lock, [&] { return gets.left == 0; });
    for (uint32_t r = 0; r < size_; r++)
      if (gets.rc[r] != PMIX_SUCCESS)
        return Status::IOError(PmixError("PMIx_Get", gets.rc[r]) + " for rank " +
                               std::to_string(r));
    return std::move(gets.values);
  }
  // A fence of every agent; with `collect`, it carries every value each agent publishes.
  static Status Fence(bool collect) {
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(nullptr, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    return rc == PMIX_SUCCESS ? Status::OK() : Status::IOError(PmixError("PMIx_Fence", rc));
  }

  pmix_proc_t me_;
  uint32_t size_ = 0;
  uint32_t round_ = 0;
  bool inited_ = false;
};

}  // namespace

Result<std::unique_ptr<Bootstrap>> MakeBootstrap(const std::string& kind) {
  bool pmix = kind == "pmix" ||
              (kind == "auto" && (std::getenv(env::kPmixRank) || std::getenv(env::kPmixNamespace)));
  if (kind != "pmix" && kind != "auto" && kind != "single")
    return Status::InvalidArgument("unknown bootstrap '" + kind + "' (auto, single or pmix)");
  if (!pmix) return std::unique_ptr<Bootstrap>(new Single);
  auto p = std::make_unique<Pmix>();
  FS_RETURN_IF_ERROR(p->Init());
  return std::unique_ptr<Bootstrap>(std::move(p));
}

}  // namespace fanstore::agent
