// Command-line parsing for every FanStore program, on CLI11: the checks that numbers, sizes and
// choices get (so that a bad value is refused with a message naming the option, before any work),
// the --help layout, and the exit status of a usage error. Header-only: only programs include it.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/text.h"

namespace fanstore::args {

inline constexpr int kExitUsage = 2;
inline constexpr int64_t kMaxThreads = 1024;  // for every --threads

// A whole number from lo to hi.
inline CLI::Validator IntRange(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        if (ParseInt(s, lo, hi)) return "";
        return "'" + s + "' is not a whole number from " + std::to_string(lo) + " to " +
               std::to_string(hi);
      },
      "");
}

// A byte count such as 4096, 64K, 256M or 4G (ParseSize), from 1 byte to `max`; the option then
// holds the number of bytes.
inline CLI::Validator Size(uint64_t max = UINT64_MAX) {
  return CLI::Validator(
      [max](std::string& s) -> std::string {
        const auto v = ParseSize(s);
        if (v && *v <= max) {
          s = std::to_string(*v);
          return "";
        }
        const std::string range =
            max == UINT64_MAX ? "" : ", at most " + HumanBytes(static_cast<double>(max));
        return "'" + s + "' is not a size above 0" + range +
               " (a number with an optional K, M, G or T suffix)";
      },
      "");
}

// A number of seconds above 0 and at most `max`.
inline CLI::Validator Seconds(double max) {
  return CLI::Validator(
      [max](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
        if (!s.empty() && *end == '\0' && std::isfinite(v) && v > 0 && v <= max) return "";
        return "'" + s + "' is not a number of seconds above 0 and at most " +
               std::to_string(static_cast<int64_t>(max));
      },
      "");
}

// One of the listed words.
inline CLI::Validator OneOf(std::vector<std::string_view> words) {
  return CLI::Validator(
      [words](std::string& s) -> std::string {
        return IsOneOf(s, words) ? "" : "'" + s + "' is not one of " + ListWords(words);
      },
      "");
}
inline CLI::Validator OneOf(std::span<const std::string_view> words) {
  return OneOf(std::vector<std::string_view>(words.begin(), words.end()));
}

// The help layout of every FanStore program: the usage line first (with `usage_tail` for what
// comes after the options, such as "-- COMMAND [ARGS...]"), then the description, the arguments
// and options, and the footer (environment, files, exit statuses).
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::string usage_tail = "") : usage_tail_(std::move(usage_tail)) {
    column_width(24);
  }
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = CLI::Formatter::make_usage(app, std::move(name));
    if (!usage.empty() && usage.back() == '\n') usage.pop_back();
    return usage + usage_tail_ + "\n";
  }
  // Arguments are described in words: no "TEXT REQUIRED" after their names.
  std::string make_option_opts(const CLI::Option* opt) const override {
    return opt->get_positional() ? "" : CLI::Formatter::make_option_opts(opt);
  }
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    std::string out = make_usage(app, std::move(name));
    const std::string desc = make_description(app);
    if (!desc.empty()) out += "\n" + desc;
    out += make_positionals(app) + make_groups(app, mode);
    const std::string footer = make_footer(app);
    if (!footer.empty()) out += "\n" + footer;
    return out;
  }

 private:
  std::string usage_tail_;
};

// Gives `app` the FanStore help layout, and getopt's rule for an option given twice: the last
// one counts (launchers may append to a command line).
inline void Configure(CLI::App& app, std::string usage_tail = "") {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.formatter(std::make_shared<HelpFormatter>(std::move(usage_tail)));
  app.get_formatter()->label("Positionals", "Arguments");
}

// A usage error found after parsing (two options that do not go together, a missing part):
// reported like the parser's own, with the same exit status.
inline int UsageError(const CLI::App& app, const std::string& message) {
  std::cerr << app.get_name() << ": " << message << "\nRun '" << app.get_name()
            << " --help' for the options.\n";
  return kExitUsage;
}

// Parses argv (argv[0] is the program or command name). Returns -1 to go on, or the exit status:
// 0 after --help (printed on stdout), kExitUsage after a usage error (its message, naming the
// option, on stderr).
inline int Parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    return UsageError(app, e.what());
  }
}

}  // namespace fanstore::args
