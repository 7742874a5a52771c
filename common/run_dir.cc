#include "common/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/io.h"

namespace fanstore::run_dir {
namespace {

constexpr size_t kMaxStatusBytes = 1 << 20;  // the list of thousands of shards still fits

constexpr std::pair<AgentState, const char*> kStateNames[] = {{AgentState::kStarting, "starting"},
                                                              {AgentState::kStaging, "staging"},
                                                              {AgentState::kReady, "ready"},
                                                              {AgentState::kFailed, "failed"}};

UniqueFD OpenDir(const std::string& dir) {
  return UniqueFD(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

}  // namespace

const char* StateName(AgentState state) {
  for (const auto& [s, name] : kStateNames)
    if (s == state) return name;
  return "unknown";  // not an AgentState
}

std::optional<AgentState> ParseState(std::string_view word) {
  for (const auto& [s, name] : kStateNames)
    if (word == name) return s;
  return std::nullopt;
}

Result<UniqueFD> HoldAlive(const std::string& dir) {
  UniqueFD fd = OpenDir(dir);
  if (!fd.valid()) return Status::FromErrno("open " + dir, errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0)
    return errno == EWOULDBLOCK ? Status::InvalidArgument(dir + " is in use by another agent")
                                : Status::FromErrno("lock " + dir, errno);
  return fd;
}

bool AgentAlive(const std::string& dir) {
  UniqueFD fd = OpenDir(dir);
  if (!fd.valid()) return false;
  return ::flock(fd.get(), LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

Result<RunStatus> ParseStatus(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::Corruption("status.json is not a JSON object");
  const auto state = j.find("state");
  if (state == j.end() || !state->is_string())
    return Status::Corruption("status.json has no \"state\" string");
  RunStatus st;
  const auto error = j.find("error");
  if (error != j.end() && error->is_string()) st.error = error->get<std::string>();
  const std::string& s = state->get_ref<const std::string&>();
  const std::optional<AgentState> parsed = ParseState(s);
  if (!parsed)
    return Status::Corruption("status.json has an unknown state \"" + s.substr(0, 40) + "\"");
  st.state = *parsed;
  const auto copy = j.find("local_copy");
  st.image = copy != j.end() && copy->is_string() && copy->get_ref<const std::string&>() == "image";
  const auto whole = j.find("whole");
  st.whole = whole != j.end() && whole->is_boolean() && whole->get<bool>();
  const auto waiting = j.find("exchange_waiting_seconds");
  if (waiting != j.end() && waiting->is_number() && waiting->get<double>() >= 0)
    st.exchange_waiting_s = waiting->get<double>();
  if (st.state == AgentState::kFailed && st.error.empty())
    st.error = "the agent failed without a message";
  return st;
}

Result<RunStatus> ReadStatus(const std::string& dir) {
  auto text = ReadSmallFile(dir + "/" + kStatusName, kMaxStatusBytes);
  if (!text.ok()) return text.status();
  auto st = ParseStatus(*text);
  if (st.ok()) st->alive = AgentAlive(dir);
  return st;
}

}  // namespace fanstore::run_dir
