// Bootstrap: the single-node case and the PMIx one.
#include "agent/bootstrap.h"

#include <pmix.h>

#include <cstdlib>
#include <cstring>

#include "common/env.h"
#include "common/log.h"

namespace fanstore::agent {
namespace {

class Single : public Bootstrap {
 public:
  uint32_t rank() const override { return 0; }
  uint32_t size() const override { return 1; }
  Result<std::vector<std::string>> Exchange(std::string mine, bool* fenced) override {
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

  // Every value is fetched from the server of the agent that published it (direct modex: the
  // fences carry no data). Slurm 22.05's fences cannot carry the first round's indexes, tens of
  // MB at ImageNet's size: its ring deadlocks when two nodes forward big contributions at once
  // (each step daemon blocks in its send while the other's reader waits for the lock that send
  // holds), and its tree drops a late rank's data from the second fence on (docs/design.md).
  Result<std::vector<std::string>> Exchange(std::string mine, bool* fenced) override {
    if (fenced) *fenced = false;
    if (!inited_) return Status::IOError("PMIx: the agent finalized its session already");
    // A key per round: a Get after the next fence must not find the previous round's value.
    const std::string key = "fanstore.meta." + std::to_string(round_);
    if (round_ > 0) {
      // A direct-modex reply carries every value its agent still publishes: the previous round's
      // goes, once every agent has read it (the barrier), so that this round moves only its own.
      FS_RETURN_IF_ERROR(Fence());
      FS_RETURN_IF_ERROR(Put("fanstore.meta." + std::to_string(round_ - 1), std::string()));
    }
    round_++;
    FS_RETURN_IF_ERROR(Put(key, std::move(mine)));
    pmix_status_t rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return Status::IOError(PmixError("PMIx_Commit", rc));
    FS_RETURN_IF_ERROR(Fence());
    if (fenced) *fenced = true;
    std::vector<std::string> all(size_);
    for (uint32_t r = 0; r < size_; r++) {
      pmix_proc_t p;
      PMIX_PROC_LOAD(&p, me_.nspace, r);
      pmix_value_t* got = nullptr;
      rc = PMIx_Get(&p, key.c_str(), nullptr, 0, &got);
      if (rc != PMIX_SUCCESS || !got)
        return Status::IOError(PmixError("PMIx_Get", rc) + " for rank " + std::to_string(r));
      if (got->type == PMIX_BYTE_OBJECT && got->data.bo.bytes)
        all[r].assign(got->data.bo.bytes, got->data.bo.size);
      PMIX_VALUE_RELEASE(got);
    }
    return all;
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
  // A fence of every agent that collects nothing.
  static Status Fence() {
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    bool collect = false;
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
