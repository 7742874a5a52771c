// Shared pieces of the `fanstore` command line.
#pragma once

namespace fanstore::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBad = 1;
inline constexpr int kExitUsage = 2;

// `fanstore run`: defined in run_cmd.cc.
int CmdRun(int argc, char** argv);

}  // namespace fanstore::cli
