// `fanstore`: pack, verify, list, read and extract FanStore datasets; `run` serves one locally.
// Exit codes: 0 OK, 1 bad data or a failed operation, 2 usage.
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ctime>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text.h"
#include "common/env.h"
#include "common/hash.h"
#include "common/proto.h"
#include "common/unique_fd.h"
#include "common/log.h"
#include "cli/cli.h"
#include "format/dataset.h"
#include "common/io.h"
#include "pack/pack.h"

namespace fanstore::cli {
namespace {

using format::Dataset;
using format::EntryType;
using format::IndexEntry;

std::atomic<bool> g_cancel{false};

void OnSignal(int) { g_cancel = true; }

int Fail(const Status& s) {
  std::fprintf(stderr, "fanstore: %s\n", s.ToString().c_str());
  return s.code() == Status::Code::kInvalidArgument ? kExitUsage : kExitBad;
}

const char kMainHelp[] =
    "Usage: fanstore COMMAND [OPTIONS] ...\n"
    "\n"
    "Job-scoped storage for deep-learning datasets on Slurm clusters.\n"
    "\n"
    "Commands:\n"
    "  pack SRC DST.fs      pack a directory tree into a dataset\n"
    "  verify DS.fs         check every hash and structure of a dataset\n"
    "  ls DS.fs [PATH]      list entries\n"
    "  cat DS.fs PATH       write one file to standard output\n"
    "  extract DS.fs DEST   restore the tree under DEST\n"
    "  info DS.fs           print the manifest summary\n"
    "  run DS.fs -- CMD...  serve a dataset on this machine and run CMD against it\n"
    "  stats                this node's agent counters (inside a FanStore job or run)\n"
    "  version              print the version\n"
    "\n"
    "Run 'fanstore COMMAND --help' for the options of a command.\n"
    "Exit status: 0 success, 1 bad data or failure, 2 usage error.\n";

const char kPackHelp[] =
    "Usage: fanstore pack SRC DST.fs [--shard-size SIZE] [--level N] [--threads N] [--dict]\n"
    "\n"
    "Packs the directory tree SRC into the new dataset directory DST.fs: manifest.json and\n"
    "shard files balanced by bytes. Files, directories (also empty ones) and symlinks that\n"
    "point inside SRC are stored; sockets, devices, FIFOs and symlinks pointing outside are\n"
    "skipped with a warning. DST.fs is written under a temporary name and renamed into place\n"
    "when complete, so an interrupted pack never leaves a dataset that looks valid.\n"
    "\n"
    "Options:\n"
    "  --shard-size SIZE  target shard size, e.g. 64M, 1G (default 256M). More shards\n"
    "                     spread better across nodes.\n"
    "  --level N          zstd level 1-19, 0 to store raw (default 3). Each file is stored\n"
    "                     compressed only when that makes it smaller.\n"
    "  --threads N        compression threads (default: all cores)\n"
    "  --dict             train a zstd dictionary, for many small files that compress poorly\n"
    "                     on their own (text, JSON)\n"
    "  --no-sync          do not fsync the output (faster; not crash-safe)\n"
    "  -q, --quiet        no progress or summary\n";

const char kVerifyHelp[] =
    "Usage: fanstore verify DS.fs [--threads N] [-q]\n"
    "\n"
    "Reads every shard completely and checks the manifest, each shard's header, index and\n"
    "footer, the checksum of each shard and of every file. On the first problem, prints the\n"
    "shard, the file and the offset, and exits 1.\n";

const char kLsHelp[] =
    "Usage: fanstore ls DS.fs [PATH] [-l] [-w]\n"
    "\n"
    "Lists the dataset's entries. Without PATH, every entry; with a directory PATH, its\n"
    "children; with a file PATH, that file.\n"
    "  -l, --long    type, mode, size and mtime\n"
    "  -w, --where   where each file is stored: shard file, frame offset, stored length, codec\n";

const char kCatHelp[] =
    "Usage: fanstore cat DS.fs PATH\n"
    "\n"
    "Writes the content of the file PATH in the dataset to standard output, after checking it.\n"
    "A file larger than 4 MiB is written as it is decoded and checked at the end: when the\n"
    "check fails, cat exits 1 and what it wrote must be discarded.\n";

const char kExtractHelp[] =
    "Usage: fanstore extract DS.fs DEST [--threads N] [-q]\n"
    "\n"
    "Restores the tree under DEST (created; if it exists it must be empty): content, modes,\n"
    "mtimes, empty directories and symlinks. Every file is verified. Nothing is ever written\n"
    "outside DEST.\n";

const char kInfoHelp[] =
    "Usage: fanstore info DS.fs [--json]\n"
    "\n"
    "Prints the manifest summary: files, directories, bytes, shards and compression ratio.\n";

bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--")) return false;
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return true;
  }
  return false;
}

int Usage(const char* help, const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "fanstore: %s\n\n", error.c_str());
  std::fputs(help, stderr);
  return kExitUsage;
}

int Help(const char* help) {
  std::fputs(help, stdout);
  return kExitOk;
}

// Progress on a terminal: one redrawn line. Elsewhere: nothing until the summary.
class Progress {
 public:
  Progress(const char* what, bool enabled) : what_(what), tty_(enabled && ::isatty(STDERR_FILENO)) {}
  void Update(uint64_t done, uint64_t total, uint64_t files_done = 0, uint64_t files_total = 0) {
    if (!tty_) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(100) && done < total) return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    double frac = total ? static_cast<double>(done) / total : 1.0;
    int width = 30, filled = static_cast<int>(frac * width);
    std::string bar(filled, '=');
    if (filled < width) bar += '>';
    bar.resize(width, ' ');
    std::string files = files_total ? "  " + std::to_string(files_done) + "/" + std::to_string(files_total) + " files" : "";
    std::fprintf(stderr, "\r%s [%s] %3.0f%%  %s / %s  %s/s%s   ", what_, bar.c_str(), frac * 100,
                 HumanBytes(done).c_str(), HumanBytes(total).c_str(),
                 HumanBytes(secs > 0 ? done / secs : 0).c_str(), files.c_str());
    shown_ = true;
  }
  void Done() {
    if (shown_) std::fputs("\n", stderr);
    shown_ = false;
  }
  double Seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  const char* what_;
  bool tty_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_;
};

bool ParseThreads(const char* s, size_t* out) {
  char* end;
  long v = std::strtol(s, &end, 10);
  if (*end || v < 1 || v > 1024) return false;
  *out = static_cast<size_t>(v);
  return true;
}

int CmdPack(int argc, char** argv) {
  if (WantsHelp(argc, argv)) return Help(kPackHelp);
  pack::Options o;
  bool quiet = false;
  static const option kOpts[] = {{"shard-size", required_argument, nullptr, 's'},
                                 {"level", required_argument, nullptr, 'l'},
                                 {"threads", required_argument, nullptr, 't'},
                                 {"dict", no_argument, nullptr, 'd'},
                                 {"no-sync", no_argument, nullptr, 'n'},
                                 {"quiet", no_argument, nullptr, 'q'},
                                 {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "q", kOpts, nullptr)) != -1) {
    switch (c) {
      case 's':
        if (!(o.shard_size = ParseSize(optarg).value_or(0))) return Usage(kPackHelp, std::string("bad --shard-size '") + optarg + "'");
        break;
      case 'l': {
        char* end;
        long v = std::strtol(optarg, &end, 10);
        if (*end || v < 0 || v > 19) return Usage(kPackHelp, std::string("bad --level '") + optarg + "' (0-19)");
        o.level = static_cast<int>(v);
        break;
      }
      case 't':
        if (!ParseThreads(optarg, &o.threads)) return Usage(kPackHelp, std::string("bad --threads '") + optarg + "'");
        break;
      case 'd': o.dict = true; break;
      case 'n': o.sync = false; break;
      case 'q': quiet = true; break;
      default: return Usage(kPackHelp, "");
    }
  }
  if (argc - optind != 2) return Usage(kPackHelp, "pack needs SRC and DST.fs");
  const std::string src = argv[optind], dst = argv[optind + 1];
  Progress progress("pack", !quiet);
  o.progress = [&](uint64_t d, uint64_t t, uint64_t fd, uint64_t ft) { progress.Update(d, t, fd, ft); };
  o.warn = [&](const std::string& w) {
    progress.Done();
    std::fprintf(stderr, "fanstore: warning: %s\n", w.c_str());
  };
  o.cancel = &g_cancel;
  pack::Stats st;
  Status s = pack::Pack(src, dst, o, &st);
  progress.Done();
  if (!s.ok()) {
    if (g_cancel) {
      std::fprintf(stderr, "fanstore: pack interrupted; nothing was left at %s\n", dst.c_str());
      return kExitBad;
    }
    return Fail(s.Prefixed("pack"));
  }
  if (!quiet) {
    double secs = progress.Seconds();
    std::printf("packed %llu files, %llu directories, %llu symlinks into %llu shard(s) at %s\n",
                (unsigned long long)st.files, (unsigned long long)st.dirs, (unsigned long long)st.symlinks,
                (unsigned long long)st.shards, dst.c_str());
    std::printf("%s raw -> %s stored (ratio %.2f)%s in %.2f s (%s/s)\n", HumanBytes(st.raw_bytes).c_str(),
                HumanBytes(st.stored_bytes).c_str(),
                st.stored_bytes ? static_cast<double>(st.raw_bytes) / st.stored_bytes : 1.0,
                st.dict_used ? " with a dictionary" : "", secs, HumanBytes(secs > 0 ? st.raw_bytes / secs : 0).c_str());
    if (st.skipped) std::printf("%llu entries skipped (see warnings above)\n", (unsigned long long)st.skipped);
  }
  return kExitOk;
}

Result<std::unique_ptr<Dataset>> OpenDs(const std::string& path) { return Dataset::Open(path); }

int CmdVerify(int argc, char** argv) {
  if (WantsHelp(argc, argv)) return Help(kVerifyHelp);
  format::VerifyOptions o;
  bool quiet = false;
  static const option kOpts[] = {{"threads", required_argument, nullptr, 't'}, {"quiet", no_argument, nullptr, 'q'}, {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "q", kOpts, nullptr)) != -1) {
    if (c == 't') {
      if (!ParseThreads(optarg, &o.threads)) return Usage(kVerifyHelp, "bad --threads");
    } else if (c == 'q') {
      quiet = true;
    } else {
      return Usage(kVerifyHelp, "");
    }
  }
  if (argc - optind != 1) return Usage(kVerifyHelp, "verify needs DS.fs");
  auto ds = OpenDs(argv[optind]);
  if (!ds.ok()) return Fail(ds.status());
  Progress progress("verify", !quiet);
  o.progress = [&](uint64_t d, uint64_t t) { progress.Update(d, t); };
  Status s = format::Verify(**ds, o);
  progress.Done();
  if (!s.ok()) return Fail(s);
  if (!quiet) {
    const auto& m = (*ds)->manifest();
    double secs = progress.Seconds();
    std::printf("OK: %llu files, %llu shards, %s verified in %.2f s\n", (unsigned long long)m.files,
                (unsigned long long)m.shards.size(), HumanBytes(m.raw_bytes).c_str(), secs);
  }
  return kExitOk;
}

std::string ModeString(const IndexEntry& e) {
  std::string s = e.type == EntryType::kDir ? "d" : e.type == EntryType::kSymlink ? "l" : "-";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; i++) s += (e.mode & (0400 >> i)) ? rwx[i] : '-';
  return s;
}

bool g_where = false;

void PrintEntry(const Dataset& ds, const IndexEntry& e, bool lng, const std::string& shown) {
  if (g_where && e.type != EntryType::kDir) {
    format::Dataset::Ref r;
    ds.Find(e.path, &r);
    static const char* const kCodec[] = {"raw", "zstd", "zstd+dict"};
    std::printf("%s %s %llu %llu %s\n", shown.c_str(), ds.manifest().shards[r.shard].file.c_str(),
                (unsigned long long)e.offset, (unsigned long long)e.stored_len, kCodec[static_cast<int>(e.codec)]);
    return;
  }
  if (!lng) {
    std::printf("%s%s\n", shown.c_str(), e.type == EntryType::kDir ? "/" : "");
    return;
  }
  char when[32];
  time_t t = e.mtime_ns / 1000000000;
  struct tm tm;
  ::localtime_r(&t, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
  std::string extra;
  if (e.type == EntryType::kSymlink) {
    format::Dataset::Ref r;
    ds.Find(e.path, &r);
    format::FrameDecoder dec(&ds.dict());
    std::string target;
    if (format::ReadEntry(ds.shard(r.shard), e, &dec, &target).ok()) extra = " -> " + target;
  }
  std::printf("%s %12llu %s %s%s\n", ModeString(e).c_str(), (unsigned long long)e.size, when, shown.c_str(), extra.c_str());
}

std::string Canon(std::string p) {
  while (!p.empty() && p.front() == '/') p.erase(0, 1);
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (p == ".") p.clear();
  return p;
}

int CmdLs(int argc, char** argv) {
  if (WantsHelp(argc, argv)) return Help(kLsHelp);
  bool lng = false;
  int c;
  static const option kOpts[] = {{"long", no_argument, nullptr, 'l'}, {"where", no_argument, nullptr, 'w'}, {nullptr, 0, nullptr, 0}};
  while ((c = getopt_long(argc, argv, "lw", kOpts, nullptr)) != -1) {
    if (c == 'l') lng = true;
    else if (c == 'w') g_where = true;
    else return Usage(kLsHelp, "");
  }
  int n = argc - optind;
  if (n < 1 || n > 2) return Usage(kLsHelp, "ls needs DS.fs and at most one PATH");
  auto ds = OpenDs(argv[optind]);
  if (!ds.ok()) return Fail(ds.status());
  std::string path = n == 2 ? Canon(argv[optind + 1]) : "";
  auto all = (*ds)->SortedEntries();
  if (n == 1) {
    for (auto* e : all) PrintEntry(**ds, *e, lng, e->path);
    return kExitOk;
  }
  if (!path.empty()) {
    const IndexEntry* e = (*ds)->Find(path);
    if (!e) return Fail(Status::NotFound(path + ": no such file or directory in the dataset"));
    if (e->type != EntryType::kDir) {
      PrintEntry(**ds, *e, lng, e->path);
      return kExitOk;
    }
  }
  const std::string prefix = path.empty() ? "" : path + "/";
  for (auto* e : all) {
    if (e->path.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = e->path.substr(prefix.size());
    if (rest.find('/') != std::string::npos) continue;
    PrintEntry(**ds, *e, lng, rest);
  }
  return kExitOk;
}

int CmdCat(int argc, char** argv) {
  if (WantsHelp(argc, argv)) return Help(kCatHelp);
  if (argc != 3) return Usage(kCatHelp, "cat needs DS.fs and PATH");
  auto ds = OpenDs(argv[1]);
  if (!ds.ok()) return Fail(ds.status());
  std::string path = Canon(argv[2]);
  Dataset::Ref r;
  const IndexEntry* e = (*ds)->Find(path, &r);
  if (!e) return Fail(Status::NotFound(path + ": no such file in the dataset"));
  if (e->type == EntryType::kDir) return Fail(Status::InvalidArgument(path + " is a directory"));
  const format::ShardFile& sh = (*ds)->shard(r.shard);
  Status s;
  if (e->size <= format::kStreamAbove && e->stored_len <= format::kStreamAbove) {
    // Checked whole before a byte is written.
    format::FrameDecoder dec(&(*ds)->dict());
    std::string data;
    s = format::ReadEntry(sh, *e, &dec, &data);
    if (s.ok()) s = WriteFull(STDOUT_FILENO, data.data(), data.size(), "standard output");
  } else {
    // Streamed, in bounded memory; its hash is checked at the end (exit status 1 if it fails).
    s = format::StreamFrame(sh.fd.get(), sh.path, *e, &(*ds)->dict(), [](std::string_view piece) {
      return WriteFull(STDOUT_FILENO, piece.data(), piece.size(), "standard output");
    });
  }
  if (!s.ok()) return Fail(s);
  return kExitOk;
}

int CmdExtract(int argc, char** argv) {
  if (WantsHelp(argc, argv)) return Help(kExtractHelp);
  format::ExtractOptions o;
  bool quiet = false;
  static const option kOpts[] = {{"threads", required_argument, nullptr, 't'}, {"quiet", no_argument, nullptr, 'q'}, {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "q", kOpts, nullptr)) != -1) {
    if (c == 't') {
      if (!ParseThreads(optarg, &o.threads)) return Usage(kExtractHelp, "bad --threads");
    } else if (c == 'q') {
      quiet = true;
    } else {
      return Usage(kExtractHelp, "");
    }
  }
  if (argc - optind != 2) return Usage(kExtractHelp, "extract needs DS.fs and DEST");
  auto ds = OpenDs(argv[optind]);
  if (!ds.ok()) return Fail(ds.status());
  Progress progress("extract", !quiet);
  o.progress = [&](uint64_t d, uint64_t t) { progress.Update(d, t); };
  Status s = format::Extract(**ds, argv[optind + 1], o);
  progress.Done();
  if (!s.ok()) return Fail(s.Prefixed("extract"));
  if (!quiet)
    std::printf("extracted %llu files to %s in %.2f s\n", (unsigned long long)(*ds)->manifest().files,
                argv[optind + 1], progress.Seconds());
  return kExitOk;
}

int CmdInfo(int argc, char** argv) {
  if (WantsHelp(argc, argv)) return Help(kInfoHelp);
  bool json = false;
  int c;
  static const option kOpts[] = {{"json", no_argument, nullptr, 'j'}, {nullptr, 0, nullptr, 0}};
  while ((c = getopt_long(argc, argv, "", kOpts, nullptr)) != -1) {
    if (c == 'j') json = true;
    else return Usage(kInfoHelp, "");
  }
  if (argc - optind != 1) return Usage(kInfoHelp, "info needs DS.fs");
  auto m = format::LoadManifest(argv[optind]);
  if (!m.ok()) return Fail(m.status());
  if (json) {
    std::fputs(format::ManifestToJson(*m).c_str(), stdout);
    return kExitOk;
  }
  uint64_t shard_bytes = 0, min_b = UINT64_MAX, max_b = 0;
  for (const auto& s : m->shards) {
    shard_bytes += s.bytes;
    min_b = std::min(min_b, s.bytes);
    max_b = std::max(max_b, s.bytes);
  }
  std::printf("dataset:      %s\n", argv[optind]);
  std::printf("format:       fanstore v%u (written by fanstore %s on %s)\n", m->version, m->tool_version.c_str(), m->created.c_str());
  std::printf("dataset id:   %s\n", HashHex(m->dataset_id).c_str());
  std::printf("files:        %llu\n", (unsigned long long)m->files);
  std::printf("directories:  %llu\n", (unsigned long long)m->dirs);
  std::printf("symlinks:     %llu\n", (unsigned long long)m->symlinks);
  std::printf("raw bytes:    %llu (%s)\n", (unsigned long long)m->raw_bytes, HumanBytes(m->raw_bytes).c_str());
  std::printf("stored bytes: %llu (%s)\n", (unsigned long long)m->stored_bytes, HumanBytes(m->stored_bytes).c_str());
  std::printf("compression:  %s level %d, ratio %.2f%s\n", m->codec.c_str(), m->level,
              m->stored_bytes ? static_cast<double>(m->raw_bytes) / m->stored_bytes : 1.0,
              m->dict.file.empty() ? "" : (", dictionary " + HumanBytes(m->dict.bytes)).c_str());
  std::printf("shards:       %zu, %s in all (smallest %s, largest %s)\n", m->shards.size(),
              HumanBytes(shard_bytes).c_str(), HumanBytes(min_b).c_str(), HumanBytes(max_b).c_str());
  return kExitOk;
}

const char kStatsHelp[] =
    "Usage: fanstore stats [--json] [FILE]\n"
    "\n"
    "Without FILE, asks this node's agent (the one named by $FANSTORE_SOCKET, set in every task\n"
    "of a FanStore job and under `fanstore run`) for its counters: files and bytes staged,\n"
    "stage-in and metadata-exchange times, and opens and bytes by source (local, cached,\n"
    "remote, fallback). In a job script, `srun --ntasks-per-node=1 fanstore stats` prints them\n"
    "for every node.\n"
    "\n"
    "With FILE, summarises the final counters the agents saved at job end (one JSON line per\n"
    "node; by default fanstore-JOBID.stats in the job's submit directory, see\n"
    "--fanstore-stats): every node, then the job's totals.\n"
    "\n"
    "  --json   print the raw counters (with FILE: a JSON array of the nodes' counters)\n";

double Num(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : 0.0; }
// obj[k] as a string; "?" when absent or not a string (the counters may come from any file).
std::string Str(const nlohmann::json& obj, const char* k) {
  if (!obj.is_object()) return "?";
  auto it = obj.find(k);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "?";
}
// obj[k] when it is an object, else an empty object.
nlohmann::json Obj(const nlohmann::json& obj, const char* k) {
  if (!obj.is_object()) return nlohmann::json::object();
  auto it = obj.find(k);
  return it != obj.end() && it->is_object() ? *it : nlohmann::json::object();
}
// Never throws: file names that are not UTF-8 come out with U+FFFD in their place.
std::string Dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }
// obj[k] as a number; 0 when absent.
double At(const nlohmann::json& obj, const char* k) { return obj.is_object() && obj.contains(k) ? Num(obj[k]) : 0.0; }

// Opens and bytes by source.
void PrintSources(const nlohmann::json& o, const nlohmann::json& b) {
  std::printf("  opens: %.0f local, %.0f cached, %.0f from peers, %.0f from the dataset, %.0f errors\n",
              At(o, "local"), At(o, "cached"), At(o, "remote"), At(o, "fallback"), At(o, "errors"));
  std::printf("  bytes: %s local, %s cached, %s from peers, %s from the dataset\n", HumanBytes(At(b, "local")).c_str(),
              HumanBytes(At(b, "cached")).c_str(), HumanBytes(At(b, "remote")).c_str(),
              HumanBytes(At(b, "fallback")).c_str());
}

void PrintNodeStats(const nlohmann::json& j) {
  std::printf("%s (rank %.0f of %.0f): staged %s (%.0f files, %.0f shards) in %.2f s; metadata exchange %.3f s\n",
              Str(j, "node").c_str(), At(j, "rank"), At(j, "size"),
              HumanBytes(At(j, "bytes_staged")).c_str(), At(j, "files_staged"), At(j, "shards_staged"),
              At(j, "stage_in_seconds"), At(j, "exchange_seconds"));
  PrintSources(Obj(j, "opens"), Obj(j, "bytes"));
}

// Sums the numbers of `from` into `into`, key by key (nested objects too).
void AddCounters(nlohmann::json& into, const nlohmann::json& from) {
  if (!into.is_object()) into = nlohmann::json::object();
  if (!from.is_object()) return;
  for (auto it = from.begin(); it != from.end(); ++it) {
    if (it.value().is_number() && (!into.contains(it.key()) || into[it.key()].is_number()))
      into[it.key()] = At(into, it.key().c_str()) + Num(it.value());
    else if (it.value().is_object())
      AddCounters(into[it.key()], it.value());
  }
}

int StatsFromFile(const std::string& path, bool json) {
  std::ifstream in(path);
  if (!in) return Fail(Status::FromErrno("open " + path, errno));
  nlohmann::json nodes = nlohmann::json::array();
  std::string line;
  for (int n = 1; std::getline(in, line); n++) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return Fail(Status::Corruption(path + ":" + std::to_string(n) + ": not a line of agent counters"));
    nodes.push_back(std::move(j));
  }
  if (nodes.empty()) return Fail(Status::Corruption(path + ": no agent counters in it"));
  if (json) {
    std::printf("%s\n", Dump(nodes).c_str());
    return kExitOk;
  }
  nlohmann::json total = nlohmann::json::object();
  for (const auto& j : nodes) {
    PrintNodeStats(j);
    nlohmann::json counters = {{"bytes_staged", At(j, "bytes_staged")},
                               {"files_staged", At(j, "files_staged")},
                               {"shards_staged", At(j, "shards_staged")},
                               {"opens", Obj(j, "opens")},
                               {"bytes", Obj(j, "bytes")}};
    AddCounters(total, counters);
  }
  double slowest = 0;
  for (const auto& j : nodes) slowest = std::max(slowest, At(j, "stage_in_seconds"));
  std::printf("job total, %zu node%s: staged %s (%.0f files) in %.2f s (slowest node)\n", nodes.size(),
              nodes.size() == 1 ? "" : "s", HumanBytes(At(total, "bytes_staged")).c_str(), At(total, "files_staged"), slowest);
  PrintSources(total["opens"], total["bytes"]);
  return kExitOk;
}

int CmdStats(int argc, char** argv) {
  if (WantsHelp(argc, argv)) return Help(kStatsHelp);
  bool json = false;
  std::string file;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--json"))
      json = true;
    else if (argv[i][0] == '-' || !file.empty())
      return Usage(kStatsHelp, std::string("unexpected argument '") + argv[i] + "'");
    else
      file = argv[i];
  }
  if (!file.empty()) return StatsFromFile(file, json);
  const char* sock = std::getenv(env::kSocket);
  if (!sock || !*sock) return Fail(Status::NotFound(std::string(env::kSocket) + " is not set: not inside a FanStore job"));
  int fd = proto::Connect(sock, 10000);
  if (fd < 0) return Fail(Status::FromErrno(std::string("agent socket ") + sock, -fd));
  UniqueFD conn(fd);
  proto::Frame req{proto::kMagic, proto::kStats, 0, 0}, rep;
  std::string buf(proto::kMaxPayload, '\0');
  int passed = -1;
  int rc = proto::Send(conn.get(), req, nullptr, -1);
  if (rc == 0) rc = proto::Recv(conn.get(), &rep, buf.data(), buf.size(), &passed);
  if (passed >= 0) ::close(passed);
  if (rc != 0) return Fail(Status::FromErrno("agent socket " + std::string(sock), -rc));
  auto j = nlohmann::json::parse(buf.substr(0, rep.len), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Fail(Status::Corruption("the agent sent bad stats"));
  if (json)
    std::printf("%s\n", Dump(j).c_str());
  else
    PrintNodeStats(j);
  return kExitOk;
}

}  // namespace

int Main(int argc, char** argv) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  log::SetTag("fanstore");
  if (argc < 2) return Usage(kMainHelp, "no command given");
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kMainHelp, stdout);
    return kExitOk;
  }
  if (cmd == "version" || cmd == "--version") {
    std::printf("fanstore %s (dataset format v%u)\n", FANSTORE_VERSION, format::kVersion);
    return kExitOk;
  }
  argc--;
  argv++;
  optind = 1;
  if (cmd == "pack") return CmdPack(argc, argv);
  if (cmd == "verify") return CmdVerify(argc, argv);
  if (cmd == "ls") return CmdLs(argc, argv);
  if (cmd == "cat") return CmdCat(argc, argv);
  if (cmd == "extract") return CmdExtract(argc, argv);
  if (cmd == "info") return CmdInfo(argc, argv);
  if (cmd == "run") return CmdRun(argc, argv);
  if (cmd == "stats") return CmdStats(argc, argv);
  return Usage(kMainHelp, "unknown command '" + cmd + "'");
}

}  // namespace fanstore::cli

int main(int argc, char** argv) {
  // The last line of defence: whatever a command's input holds, it ends with a message.
  try {
    return fanstore::cli::Main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fanstore: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fanstore: internal error: %s\n", e.what());
  }
  return fanstore::cli::kExitBad;
}
