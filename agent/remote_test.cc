// Files held by another rank, with peers off: read from the shard in the dataset directory,
// verified, kept in the cache (or a sealed memfd without one), and never more than
// kMaxSourceReads at a time.
#include "agent/remote.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/placement.h"
#include "agent/testing.h"
#include "common/io.h"
#include "common/testing/threads.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"

namespace fanstore::agent {
namespace {

using namespace std::chrono_literals;
using testing::Dataset;
using testing::ReadFd;

struct FileId {
  uint32_t shard, entry;
};

class RemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ds_.Make(12, big_bytes_, /*holes=*/true);
    cache_dir_ = ds_.tmp() + "/cache";
    ASSERT_EQ(::mkdir(cache_dir_.c_str(), 0700), 0);
    remote_files_ = FilesOf(1);
    ASSERT_GE(remote_files_.size(), 8u);
  }
  // The files of the shards `rank` holds (of 2 ranks, one copy each).
  std::vector<FileId> FilesOf(uint32_t rank) const {
    std::vector<FileId> out;
    for (uint32_t s : ShardsOf(rank, ds_.nshards(), /*size=*/2, /*replicas=*/1))
      for (uint32_t i : ds_.Files(s)) out.push_back({s, i});
    return out;
  }
  // Rank 0 of 2 (or `rank`), peers and prefetch off (unless `peers`): the other rank's files
  // come from the dataset directory.
  void Init(uint64_t cache_capacity, uint32_t rank = 0, bool peers = false) {
    RemoteFiles::Context ctx;
    ctx.index = &ds_.index();
    ctx.manifest = &ds_.manifest();
    ctx.dict = &ds_.dict();
    ctx.dataset = ds_.dir();
    ctx.size = 2;
    ctx.rank = rank;
    ctx.replicas = 1;
    ctx.peers = peers;
    ctx.prefetch = peers;
    remote_.Init(std::move(ctx), cache_dir_, cache_capacity);
  }
  const std::string& Expected(FileId f) const {
    return ds_.Bytes(ds_.Entry(f.shard, f.entry).path);
  }
  // Opens `f` and returns its content ("<error: ...>" when the open fails).
  std::string OpenAndRead(FileId f) {
    auto fd = remote_.Open(f.shard, f.entry);
    if (!fd.ok()) return "<error: " + fd.status().ToString() + ">";
    UniqueFD owned(*fd);
    return ReadFd(owned.get());
  }

  // 12 threads open `f` at once: every one reads the right bytes, and the source is read once.
  void ExpectOneReadForConcurrentOpens(FileId f) {
    constexpr int kThreads = 12;
    std::atomic<int> wrong{0};
    test::RunTogether(kThreads, [&](int) {
      if (OpenAndRead(f) != Expected(f)) wrong++;
    });
    EXPECT_EQ(wrong, 0);
    const auto c = remote_.counters();
    EXPECT_EQ(c.opens_fallback, 1u);
    EXPECT_EQ(c.opens_cached, kThreads - 1u);
  }

  Dataset ds_;
  std::string cache_dir_;
  size_t big_bytes_ = 0;  // a file "big" of that size in the dataset
  std::vector<FileId> remote_files_;
  RemoteFiles remote_;
};

TEST_F(RemoteTest, OpenReadsTheDatasetThenTheCache) {
  Init(1 << 20);
  const FileId f = remote_files_[0];
  const uint64_t size = ds_.Entry(f.shard, f.entry).size;
  EXPECT_EQ(OpenAndRead(f), Expected(f));
  auto c = remote_.counters();
  EXPECT_EQ(c.opens_fallback, 1u);
  EXPECT_EQ(c.bytes_fallback, size);
  EXPECT_EQ(c.opens_cached, 0u);
  EXPECT_EQ(c.opens_remote, 0u);
  EXPECT_EQ(remote_.cache().used(), size);

  EXPECT_EQ(OpenAndRead(f), Expected(f));
  c = remote_.counters();
  EXPECT_EQ(c.opens_fallback, 1u);
  EXPECT_EQ(c.opens_cached, 1u);
  EXPECT_EQ(c.bytes_cached, size);
  EXPECT_EQ(c.peer_errors, 0u);
  EXPECT_EQ(c.prefetched_shards, 0u);  // prefetch off
}

TEST_F(RemoteTest, WithoutCacheTheDescriptorIsASealedMemfd) {
  Init(0);
  const FileId f = remote_files_[1];
  auto fd = remote_.Open(f.shard, f.entry);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  UniqueFD owned(*fd);
  const int seals = ::fcntl(owned.get(), F_GET_SEALS);
  ASSERT_GE(seals, 0) << "not a memfd";
  for (int seal : {F_SEAL_WRITE, F_SEAL_GROW, F_SEAL_SHRINK, F_SEAL_SEAL})
    EXPECT_TRUE(seals & seal) << "seal " << seal << " missing from " << seals;
  EXPECT_EQ(ReadFd(owned.get()), Expected(f));
  EXPECT_EQ(::lseek(owned.get(), 0, SEEK_CUR), 0);  // handed over at offset 0
  EXPECT_LT(::pwrite(owned.get(), "x", 1, 0), 0);   // the opener cannot change it
  EXPECT_EQ(ReadFd(owned.get()), Expected(f));
  // Nothing kept: the next open reads the dataset again.
  EXPECT_EQ(OpenAndRead(f), Expected(f));
  const auto c = remote_.counters();
  EXPECT_EQ(c.opens_fallback, 2u);
  EXPECT_EQ(c.opens_cached, 0u);
  EXPECT_EQ(remote_.cache().used(), 0u);
}

// A file fetched for this node keeps the holes of its source, in the cache and in a memfd:
// SEEK_DATA and SEEK_HOLE answer as on the source's file system.
TEST_F(RemoteTest, FetchedFilesKeepTheirHoles) {
  const auto [shard, entry] = ds_.Find("holes");
  for (uint64_t capacity : {uint64_t{1} << 20, uint64_t{0}}) {
    Init(capacity);
    auto fd = remote_.Open(shard, entry);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    UniqueFD owned(*fd);
    EXPECT_EQ(ReadFd(owned.get()), ds_.Bytes("holes"));
    EXPECT_EQ(::lseek(owned.get(), 0, SEEK_DATA), 32 << 10) << "capacity " << capacity;
    EXPECT_EQ(::lseek(owned.get(), 32 << 10, SEEK_HOLE), 36 << 10) << "capacity " << capacity;
    struct stat st;
    ASSERT_EQ(::fstat(owned.get(), &st), 0);
    EXPECT_EQ(st.st_size, 64 << 10);
    EXPECT_LT(st.st_blocks * 512, 64 << 10);
  }
}

TEST_F(RemoteTest, DamagedShardGivesAnErrorNeverBadBytes) {
  Init(1 << 20);
  const FileId f = remote_files_[2];
  const auto& e = ds_.Entry(f.shard, f.entry);
  testing::DamageFrame(ds_.ShardPath(f.shard), e);
  for (int attempt = 0; attempt < 2; attempt++) {  // nothing cached by the first attempt
    auto fd = remote_.Open(f.shard, f.entry);
    ASSERT_FALSE(fd.ok()) << "attempt " << attempt;
    EXPECT_NE(fd.status().ToString().find(e.path), std::string::npos) << fd.status().ToString();
  }
  const auto c = remote_.counters();
  EXPECT_EQ(c.opens_fallback + c.opens_cached + c.opens_remote, 0u);
  EXPECT_EQ(c.bytes_fallback + c.bytes_cached + c.bytes_remote, 0u);
  EXPECT_EQ(remote_.cache().used(), 0u);
}

TEST_F(RemoteTest, ConcurrentOpensOfOneFileReadTheSourceOnce) {
  Init(1 << 20);
  ExpectOneReadForConcurrentOpens(remote_files_[3]);
}

// The node's image keeps the files fetched for it (issue 31): each at its extent of the blob,
// kept once verified, never a file of its own in the cache. Here the blob is a plain file and
// "opening through the mount" reads the extent back into a memfd.
class RemoteImageTest : public RemoteTest {
 protected:
  void InitImage(int blob_flags = O_RDWR, bool peers = false) {
    Init(1 << 20, 0, peers);
    blob_path_ = ds_.tmp() + "/blob";
    blob_.Reset(::open(blob_path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
    ASSERT_TRUE(blob_.valid());
    uint64_t end = 0;
    for (FileId f : remote_files_) {  // 512-byte aligned, as the image lays them out
      extent_[Key(f)] = end;
      end += (ds_.Entry(f.shard, f.entry).size + 511) / 512 * 512;
    }
    ASSERT_EQ(::ftruncate(blob_.get(), static_cast<off_t>(end)), 0);  // a hole, as the agent's
    if (blob_flags != O_RDWR) blob_.Reset(::open(blob_path_.c_str(), blob_flags | O_CLOEXEC));
    RemoteFiles::ImageExtents x;
    x.blob = blob_.get();
    x.extent = [this](uint32_t s, uint32_t i) {
      auto it = extent_.find(Key({s, i}));
      return it == extent_.end() ? RemoteFiles::kNoExtent : it->second;
    };
    x.kept = [this](uint32_t s, uint32_t i) {
      std::lock_guard<std::mutex> l(mu_);
      return kept_.count(Key({s, i})) != 0;
    };
    x.keep = [this](uint32_t s, uint32_t i) {
      if (on_keep_) on_keep_({s, i});
      std::lock_guard<std::mutex> l(mu_);
      kept_.insert(Key({s, i}));
    };
    x.open = [this](uint32_t s, uint32_t i) -> Result<int> {
      opens_through_image_++;
      const std::string bytes = Extent({s, i});
      UniqueFD m(::memfd_create("extent", MFD_CLOEXEC));
      if (!m.valid() || !PwriteFull(m.get(), bytes, 0, "memfd").ok())
        return Status::IOError("memfd");
      return m.Release();
    };
    remote_.UseImage(std::move(x));
  }
  static uint64_t Key(FileId f) { return uint64_t{f.shard} << 32 | f.entry; }
  std::string Extent(FileId f) {  // what the blob holds at f's extent
    std::string out(ds_.Entry(f.shard, f.entry).size, '\0');
    Status st = PreadFull(blob_.get(), out.data(), out.size(), extent_[Key(f)], "blob");
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }
  bool Kept(FileId f) {
    std::lock_guard<std::mutex> l(mu_);
    return kept_.count(Key(f)) != 0;
  }

  std::string blob_path_;
  UniqueFD blob_;
  std::map<uint64_t, uint64_t> extent_;
  std::mutex mu_;
  std::set<uint64_t> kept_;
  std::atomic<int> opens_through_image_{0};
  std::function<void(FileId)> on_keep_;  // called as a file is kept, before it is
};

TEST_F(RemoteImageTest, FetchedFilesGoToTheirExtentsNotTheCache) {
  InitImage();
  for (FileId f : remote_files_) {
    EXPECT_EQ(OpenAndRead(f), Expected(f));
    EXPECT_TRUE(Kept(f));
    EXPECT_EQ(Extent(f), Expected(f));
  }
  for (FileId f : remote_files_) EXPECT_EQ(OpenAndRead(f), Expected(f));
  const auto c = remote_.counters();
  EXPECT_EQ(c.opens_fallback, remote_files_.size());
  EXPECT_EQ(c.opens_cached, remote_files_.size());  // the second opens: from the image
  EXPECT_EQ(opens_through_image_, 2 * static_cast<int>(remote_files_.size()));
  EXPECT_EQ(remote_.cache().used(), 0u);
  EXPECT_EQ(::rmdir(cache_dir_.c_str()), 0) << "the cache directory is not empty";
}

TEST_F(RemoteImageTest, DamagedFileIsNeverKept) {
  InitImage();
  const FileId f = remote_files_[2];
  testing::DamageFrame(ds_.ShardPath(f.shard), ds_.Entry(f.shard, f.entry));
  for (int attempt = 0; attempt < 2; attempt++) {
    auto fd = remote_.Open(f.shard, f.entry);
    EXPECT_FALSE(fd.ok()) << "attempt " << attempt;
    EXPECT_FALSE(Kept(f));
  }
  EXPECT_EQ(opens_through_image_, 0);
}

// A blob that cannot take the bytes (a full disk; here read-only): served from a memfd, kept
// nowhere.
TEST_F(RemoteImageTest, UnwritableBlobServesFromMemory) {
  InitImage(O_RDONLY);
  const FileId f = remote_files_[0];
  auto fd = remote_.Open(f.shard, f.entry);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  UniqueFD owned(*fd);
  EXPECT_GE(::fcntl(owned.get(), F_GET_SEALS), 0) << "not a memfd";
  EXPECT_EQ(ReadFd(owned.get()), Expected(f));
  EXPECT_FALSE(Kept(f));
  EXPECT_EQ(opens_through_image_, 0);
}

TEST_F(RemoteImageTest, ConcurrentOpensOfOneFileReadTheSourceOnce) {
  InitImage();
  ExpectOneReadForConcurrentOpens(remote_files_[3]);
}

// A holder of one remote shard, over the peer service on loopback, whose stream stalls before
// the shard's second file until resume().
class RemotePrefetchTest : public RemoteImageTest {
 protected:
  void SetUp() override {
    RemoteImageTest::SetUp();
    if (!testing::StartMunged()) GTEST_SKIP() << "munged is not running";
    shard_ = remote_files_[0].shard;
    files_ = ds_.Files(shard_);
    ASSERT_GE(files_.size(), 2u);
    first_ = {shard_, files_[0]};
    next_ = {shard_, files_[1]};
    resumed_ = resume_.get_future().share();
    ASSERT_TRUE(
        holder_
            .Start(
                "127.0.0.1", PeerIdentity{"job-r", 1},
                [this](uint32_t s, uint32_t e, int* fd, uint64_t* n) {
                  if (s == next_.shard && e == next_.entry) resumed_.wait_for(10s);
                  const std::string& bytes = Expected({s, e});
                  UniqueFD m(::memfd_create("served", MFD_CLOEXEC));
                  if (!m.valid() || !PwriteFull(m.get(), bytes, 0, "memfd").ok()) return EIO;
                  *fd = m.Release();
                  *n = bytes.size();
                  return 0;
                },
                [this](uint32_t s) { return s == shard_ ? files_ : std::vector<uint32_t>{}; },
                &pool_)
            .ok());
    InitImage(O_RDWR, /*peers=*/true);
    remote_.peers().SetIdentity(PeerIdentity{"job-r", 0});
    remote_.peers().SetEndpoints({"", holder_.Endpoint()});
  }
  void TearDown() override {
    Resume();        // the stream ends, and the holder's pool can join
    remote_.Stop();  // the stream's thread must not outlive what on_keep_ refers to
    on_keep_ = nullptr;
  }
  void Resume() {
    if (!resumed_once_) resume_.set_value();
    resumed_once_ = true;
  }
  // On keeping the first file, with its claim held: an open of it on another thread, returned
  // once that open waits for the claim.
  std::future<std::future<std::string>> OpenTheFirstFileAsItIsKept(int hold_ms = 0) {
    on_keep_ = [this, hold_ms](FileId f) {
      if (f.shard != first_.shard || f.entry != first_.entry) return;
      auto opened = std::async(std::launch::async, [this] { return OpenAndRead(first_); });
      for (int i = 0; i < 500 && remote_.counters().opens_waited == 0; i++)
        std::this_thread::sleep_for(10ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
      opener_.set_value(std::move(opened));
    };
    return opener_.get_future();
  }

  uint32_t shard_ = 0;
  std::vector<uint32_t> files_;
  FileId first_{}, next_{};
  std::promise<void> resume_;
  std::shared_future<void> resumed_;
  bool resumed_once_ = false;
  std::promise<std::future<std::string>> opener_;  // set by the stream's thread: outlives it
  ThreadPool pool_{2};
  PeerServer holder_;  // after the pool: stopped before it
};

// An open that waits for a file the prefetch stream is writing has it as soon as the file is
// kept, not when the stream's next file begins: here the holder stalls before its next file.
TEST_F(RemotePrefetchTest, AnOpenWaitingForAStreamedFileHasItOnceItIsKept) {
  auto started = OpenTheFirstFileAsItIsKept();
  remote_.MaybePrefetch(shard_);
  ASSERT_EQ(started.wait_for(10s), std::future_status::ready) << "the stream never kept the file";
  std::future<std::string> opened = started.get();
  ASSERT_EQ(remote_.counters().opens_waited, 1u) << "the open did not wait for the stream";
  // Within the client's I/O timeout (kIoTimeoutMs, 3 s), after which a stalled stream fails
  // and gives its claim back anyway.
  ASSERT_EQ(opened.wait_for(2s), std::future_status::ready)
      << "the open waited for the holder's next file";
  EXPECT_EQ(opened.get(), Expected(first_));
  EXPECT_TRUE(Kept(first_));
  EXPECT_FALSE(Kept(next_));  // the holder still stalls before it
  Resume();
  for (int i = 0; i < 500 && remote_.counters().prefetched_shards == 0; i++)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(remote_.counters().prefetched_shards, 1u);  // the stream went on, it did not time out
  EXPECT_EQ(remote_.counters().peer_errors, 0u);
  EXPECT_TRUE(Kept(next_));
  EXPECT_EQ(remote_.counters().opens_waited_out, 0u);
}

// An open never waits for ever for another's fetch of its file: a holder of the claim that
// stays stuck (here, for 3 s while it keeps the file) is passed by, and the open reads the
// file from the peer into memory, leaving the extent to the holder.
TEST_F(RemotePrefetchTest, AnOpenStopsWaitingForAStuckFetch) {
  remote_.SetClaimWaitForTest(300);
  auto started = OpenTheFirstFileAsItIsKept(/*hold_ms=*/3000);
  remote_.MaybePrefetch(shard_);
  ASSERT_EQ(started.wait_for(15s), std::future_status::ready) << "the stream never kept the file";
  std::future<std::string> opened = started.get();
  ASSERT_EQ(opened.wait_for(1s), std::future_status::ready);
  EXPECT_EQ(opened.get(), Expected(first_));
  const auto c = remote_.counters();
  EXPECT_EQ(c.opens_waited, 1u);
  EXPECT_EQ(c.opens_waited_out, 1u);
  EXPECT_EQ(c.opens_remote, 1u);       // from the peer, into memory
  EXPECT_EQ(opens_through_image_, 0);  // not through the extent: the holder's to write
}

// With a file that takes longer to read and decode than a time slice, concurrent readers are
// preempted inside their reads: without the limit more than kMaxSourceReads would be in flight.
class RemoteLimitTest : public RemoteTest {
 protected:
  void SetUp() override {
    big_bytes_ = 16 << 20;
    RemoteTest::SetUp();
  }
};

TEST_F(RemoteLimitTest, SourceReadsStayWithinTheLimit) {
  const auto [s, i] = ds_.Find("big");
  const FileId big{s, i};
  // We are the rank that does not hold it; no cache: every open reads the dataset.
  const uint32_t rank = Holders(s, 2, 1)[0] == 0 ? 1 : 0;
  Init(0, rank);
  const std::vector<FileId> small = FilesOf(1 - rank);
  constexpr int kThreads = 8, kRounds = 2;
  // All readers on one CPU, so that they take turns inside their reads.
  cpu_set_t all, one;
  ASSERT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  std::atomic<int> wrong{0};
  test::RunTogether(kThreads, [&](int t) {
    for (int r = 0; r < kRounds; r++) {
      if (OpenAndRead(big) != Expected(big)) wrong++;
      const FileId f = small[(t + r) % small.size()];
      if (OpenAndRead(f) != Expected(f)) wrong++;
    }
  });
  ASSERT_EQ(::sched_setaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(wrong, 0);
  const auto c = remote_.counters();
  EXPECT_EQ(c.opens_fallback, 2u * kThreads * kRounds);
  EXPECT_GE(c.source_peak, 2);
  EXPECT_LE(c.source_peak, RemoteFiles::kMaxSourceReads);
}

}  // namespace
}  // namespace fanstore::agent
