// `fanstore run --output DIR`: the command's output directory, on local storage, drained to DIR
// on the parallel file system in the background (output/drainer.h), waited for when the command
// ends, up to a bound.
#pragma once

#include <memory>
#include <string>

#include "output/drainer.h"

namespace fanstore::cli {

class RunOutput {
 public:
  // `target`: the directory on the parallel file system; `local_parent`: where the local
  // directory goes (fanstore-output.XXXXXX, 0700).
  RunOutput(std::string target, std::string local_parent, double drain_timeout_s);
  ~RunOutput();
  // Makes the local directory and starts draining it; false after a message.
  bool Start();
  // The local directory, for FANSTORE_OUTPUT.
  const std::string& local() const { return local_; }
  // Waits for the drain, up to the bound; names on stderr what did not drain, which then stays
  // in the local directory (its path said too). Removes the local directory when all drained.
  // False when something did not drain.
  bool Finish();

 private:
  std::string target_, parent_, local_;
  double timeout_s_;
  std::unique_ptr<output::Drainer> drainer_;
};

}  // namespace fanstore::cli
