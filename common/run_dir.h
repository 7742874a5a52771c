// The run directory's contract, shared by the agent (which writes it) and everything that reads
// it: the launchers (`fanstore run`, the SPANK plugin), the tools and the tests.
//
//   <run dir>/agent.sock    the local service (mode 0600)
//   <run dir>/table         the metadata table (0600), mapped by clients
//   <run dir>/counters      clients' open counters (0600)
//   <run dir>/status.json   {"state": "starting|staging|ready|failed", "error": ..., ...}
//
// status.json is written atomically and cannot change when its writer dies, so the agent also
// holds an exclusive lock on the run directory for as long as it lives (the kernel drops it
// when the process ends, even by SIGKILL). A reader that can take the lock knows that no agent
// stands behind the file, whatever it says.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace fanstore::run_dir {

inline constexpr char kSocketName[] = "agent.sock";
inline constexpr char kTableName[] = "table";
inline constexpr char kStatusName[] = "status.json";

// Takes the directory's lock for the calling agent; keep the descriptor open until exit. Fails
// when another live agent holds it.
Result<UniqueFD> HoldAlive(const std::string& dir);

// True while an agent holds `dir`'s lock.
bool AgentAlive(const std::string& dir);

// status.json, as the agent writes it: {"state":"starting|staging|ready|failed","error":...}.
enum class AgentState { kStarting, kStaging, kReady, kFailed };
// The state's word in status.json ("starting", ...), and back: nullopt for any other word.
const char* StateName(AgentState state);
std::optional<AgentState> ParseState(std::string_view word);
struct RunStatus {
  AgentState state = AgentState::kStarting;
  std::string error;   // why it failed; never empty when state is kFailed
  bool alive = false;  // an agent held the directory's lock when the file was read
  bool image = false;  // "local_copy": "image": the node's share is a mounted EROFS image
  bool whole = false;  // "whole": the node holds every shard
  // "exchange_waiting_seconds": how long the agent has been in a round of the metadata exchange
  // (the PMIx fence with every other node's agent), as of its last write; -1 when in none.
  double exchange_waiting_s = -1;
  // A live state with no agent behind it: the agent died (killed, crashed) without a word.
  bool Dead() const { return !alive && state != AgentState::kFailed; }
};

// Reads and checks status.json. NotFound while there is none; Corruption when it is not the
// agent's (garbage, not an object, no or an unknown state): callers wait on both.
Result<RunStatus> ReadStatus(const std::string& dir);
// Parses status.json's text (alive is left false).
Result<RunStatus> ParseStatus(const std::string& text);

}  // namespace fanstore::run_dir
