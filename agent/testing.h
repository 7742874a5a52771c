// For the agent's tests: a small real dataset packed with pack::Pack, its manifest, dictionary
// and every shard's index, and the bytes each file must have; a client of the local protocol.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/index.h"
#include "common/io.h"
#include "common/proto.h"
#include "format/manifest.h"
#include "format/shard.h"
#include "format/testing.h"
#include "pack/pack.h"
#include "stage/stage.h"

namespace fanstore::agent::testing {

using format::testing::TempDir;

// Whether the node's munged answers (the peer service's handshake needs it). Root (CI) starts it
// first, the way tests/lib.sh does; others need it running.
inline bool MungeWorks() {
  return std::system("munge -n 2>/dev/null | unmunge >/dev/null 2>&1") == 0;
}
inline bool StartMunged() {
  if (!MungeWorks() && ::getuid() == 0)
    (void)std::system(
        "mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge "
        "/var/log/munge /var/lib/munge && runuser -u munge -- /usr/sbin/munged --force "
        ">/dev/null 2>&1; for i in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 "
        "&& break; sleep 0.1; done");
  return MungeWorks();
}

// A plain TCP connection to "addr:port", as anyone on the node may open (invalid if refused).
inline UniqueFD ConnectRaw(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::atoi(endpoint.c_str() + colon + 1)));
  ::inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &sa.sin_addr);
  UniqueFD fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return UniqueFD();
  return fd;
}

// Distinct bytes per file (and per position), so that a wrong file or offset shows.
inline std::string Content(int file, size_t size) {
  std::string s(size, '\0');
  for (size_t k = 0; k < size; k++) s[k] = static_cast<char>('a' + (file * 7 + k * k / 5) % 26);
  return s;
}

// The whole content of an open descriptor, from offset 0.
inline std::string ReadFd(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return "<fstat failed>";
  std::string s(static_cast<size_t>(st.st_size), '\0');
  if (!PreadFull(fd, s.data(), s.size(), 0, "fd").ok()) return "<read failed>";
  return s;
}

struct Answer {
  int rc = 0;  // of proto::Recv, or of Send when that failed
  proto::Frame frame{};
  std::string payload;
  int fd = -1;
};

// One request on `sock`, its reply, as the interceptor and the `fanstore` tool ask.
inline Answer Ask(int sock, proto::Op op, const std::string& payload = "") {
  Answer a;
  proto::Frame f{proto::kMagic, op, 0, static_cast<uint32_t>(payload.size())};
  a.rc = proto::Send(sock, f, payload.data(), -1);
  if (a.rc != 0) return a;
  std::vector<char> buf(proto::kMaxPayload);
  a.rc = proto::Recv(sock, &a.frame, buf.data(), buf.size(), &a.fd);
  if (a.rc == 0) a.payload.assign(buf.data(), a.frame.len);
  return a;
}

// Flips one byte in the middle of `e`'s frame in the shard file at `path`.
inline void DamageFrame(const std::string& path, const format::IndexEntry& e) {
  std::string shard = format::testing::ReadFile(path);
  ASSERT_GT(e.stored_len, 0u);
  shard[e.offset + e.stored_len / 2] ^= 0x5a;
  format::testing::WriteFile(path, shard);
}

// A packed tree: d<0..3>/f<0..n> of a few hundred bytes to a few KiB, a symlink, in several
// shards under <tmp>/ds.fs.
class Dataset {
 public:
  // Call from SetUp (gtest assertions). With big_bytes, also a file "big" of that size; with
  // holes, a file "holes" of 64 KiB of zeros with 4 bytes of data in its middle.
  void Make(int files_per_dir = 12, size_t big_bytes = 0, bool holes = false) {
    const std::string src = tmp_.path() + "/src";
    ASSERT_EQ(::mkdir(src.c_str(), 0700), 0);
    int n = 0;
    for (int d = 0; d < 4; d++) {
      const std::string sub = "d" + std::to_string(d);
      ASSERT_EQ(::mkdir((src + "/" + sub).c_str(), 0700), 0);
      for (int f = 0; f < files_per_dir; f++, n++) {
        const std::string rel = sub + "/f" + std::to_string(f);
        files_[rel] = Content(n, 300 + static_cast<size_t>(n) * 97 % 3000);
        format::testing::WriteFile(src + "/" + rel, files_[rel]);
      }
    }
    if (big_bytes) {
      files_["big"] = Content(n, big_bytes);
      format::testing::WriteFile(src + "/big", files_["big"]);
    }
    if (holes) {
      files_["holes"] = std::string(64 << 10, '\0');
      files_["holes"].replace(32 << 10, 4, "data");
      format::testing::WriteFile(src + "/holes", files_["holes"]);
    }
    ASSERT_EQ(::symlink("d0/f1", (src + "/link").c_str()), 0);
    pack::Options po;
    po.shard_size = 8 << 10;  // several shards
    po.sync = false;
    pack::Stats ps;
    Status st = pack::Pack(src, dir(), po, &ps);
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto m = format::LoadManifest(dir());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manifest_ = std::move(m).value();
    ASSERT_GE(manifest_.shards.size(), 3u);
    ASSERT_TRUE(dict_.Load(dir(), manifest_.dict).ok());
    auto sh = stage::OpenShards(dir(), manifest_, AllShards());
    ASSERT_TRUE(sh.ok()) << sh.status().ToString();
    // The agent's index and table, built as the agent builds them from the stored indexes.
    format::FrameDecoder dec(&dict_);
    for (const auto& s : *sh) {
      entries_.push_back(s->entries);
      stored_.push_back(s->index_stored);
      for (const auto& e : s->entries) {
        if (e.type != format::EntryType::kSymlink) continue;
        ASSERT_TRUE(format::ReadEntry(*s, e, &dec, &links_[e.path]).ok());
      }
    }
    Index::Source is;
    for (uint32_t s = 0; s < nshards(); s++)
      is.shards.push_back(StoredIndex{(*sh)[s]->footer, stored_[s]});
    is.links = &links_;
    is.root = table::Node{"", S_IFDIR | 0755, 0, 0, 0, {}};
    is.file_flags = [](uint32_t, const format::IndexEntry&, table::Node*) {};
    st = index_.Build(is, {}, [&](size_t n) -> Result<char*> {
      table_.assign(n, '\0');
      return table_.data();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(view_.Attach(table_).ok());
    index_.Attach(&view_);
  }

  const std::string& tmp() const { return tmp_.path(); }
  std::string dir() const { return tmp_.path() + "/ds.fs"; }
  std::string ShardPath(uint32_t s) const { return dir() + "/" + manifest_.shards[s].file; }
  uint32_t nshards() const { return static_cast<uint32_t>(manifest_.shards.size()); }
  std::vector<uint32_t> AllShards() const {
    std::vector<uint32_t> ids;
    for (uint32_t s = 0; s < nshards(); s++) ids.push_back(s);
    return ids;
  }
  // The regular files of shard `s`, by entry.
  std::vector<uint32_t> Files(uint32_t s) const {
    std::vector<uint32_t> out;
    for (uint32_t i = 0; i < entries_[s].size(); i++)
      if (entries_[s][i].type == format::EntryType::kFile) out.push_back(i);
    return out;
  }
  const format::IndexEntry& Entry(uint32_t s, uint32_t i) const { return entries_[s][i]; }
  // The shard and entry of the file at `path`.
  std::pair<uint32_t, uint32_t> Find(const std::string& path) const {
    for (uint32_t s = 0; s < entries_.size(); s++)
      for (uint32_t i = 0; i < entries_[s].size(); i++)
        if (entries_[s][i].path == path) return {s, i};
    ADD_FAILURE() << path << " not in the dataset";
    return {0, 0};
  }
  // The content the file at `path` was packed with.
  const std::string& Bytes(const std::string& path) const { return files_.at(path); }
  const std::map<std::string, std::string>& files() const { return files_; }

  const format::Manifest& manifest() const { return manifest_; }
  const format::Dictionary& dict() const { return dict_; }
  const Index& index() const { return index_; }

 private:
  TempDir tmp_;
  std::map<std::string, std::string> files_;
  format::Manifest manifest_;
  format::Dictionary dict_;
  std::vector<std::vector<format::IndexEntry>> entries_;  // every shard's entries
  std::vector<std::string> stored_;                       // every shard's stored index
  std::unordered_map<std::string, std::string> links_;    // symlink targets
  std::string table_;
  table::TableView view_;
  Index index_;  // as the agent has it
};

}  // namespace fanstore::agent::testing
