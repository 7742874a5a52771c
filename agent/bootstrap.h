// How the agents of one job find each other: rank, size, and an all-to-all exchange of one
// blob per agent. PMIx when started as a Slurm step with --mpi=pmix; a single node otherwise.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace fanstore::agent {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual uint32_t rank() const = 0;
  virtual uint32_t size() const = 0;
  // The namespace the launcher gave this job step ("" without one): it names the job in the
  // peers' handshake.
  virtual std::string nspace() const { return ""; }
  // Publishes `mine` and returns every agent's blob, indexed by rank. Collective: every agent
  // calls it the same number of times (the agent: twice). With `fenced`, says whether this
  // agent met the others (an error after that still leaves them expecting the next round).
  // `mine` is taken, and freed once published (it may be most of the dataset's metadata).
  // `large`: the blobs may be MB each, too big for the launcher's collective to carry; each is
  // then fetched from its publisher. Agents that disagree on it still meet.
  virtual Result<std::vector<std::string>> Exchange(std::string mine, bool* fenced, bool large) = 0;
  // Ends the job-wide session (PMIx_Finalize). Safe to call twice.
  virtual void Finalize() {}
};

// kind: "single", "pmix" or "auto" (PMIx when PMIX_RANK or PMIX_NAMESPACE is set).
Result<std::unique_ptr<Bootstrap>> MakeBootstrap(const std::string& kind);

}  // namespace fanstore::agent
