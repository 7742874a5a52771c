// Unit tests of the plugstack argument parser.
#include "spank-plugin/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>

namespace fanstore::spank {
namespace {

TEST(ConfigTest, DefaultsWithoutArguments) {
  auto c = ParseConfig({});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->mount_prefix, "/fanstore");
  EXPECT_EQ(c->run_dir, "/dev/shm");
  EXPECT_EQ(c->stagein_timeout, 600);
  EXPECT_EQ(c->replicas, "1");  // split by default, one copy of each shard
  EXPECT_TRUE(c->job_fs);       // local_fs=auto
  EXPECT_FALSE(ParseConfig({"local_fs=dir"})->job_fs);
  EXPECT_FALSE(ParseConfig({"local_fs=tmpfs"}).ok());
  EXPECT_EQ(c->agent.substr(c->agent.size() - 15), "/fanstore-agent");
  EXPECT_EQ(c->drain_timeout, 300);  // a few minutes for the output to drain
  EXPECT_EQ(ParseConfig({"drain_timeout=0"})->drain_timeout, 0);
  EXPECT_EQ(ParseConfig({"drain_timeout=3600"})->drain_timeout, 3600);
}

TEST(ConfigTest, EveryKey) {
  auto c =
      ParseConfig({"agent=/opt/fs/bin/fanstore-agent", "preload=/opt/fs/lib/libfanstore_preload.so",
                   "srun=/opt/slurm/bin/srun", "local_dir=/local/%u/%n", "run_dir=/run/fs",
                   "mount_prefix=/data", "stagein_timeout=30", "replicas=2"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->agent, "/opt/fs/bin/fanstore-agent");
  EXPECT_EQ(c->preload, "/opt/fs/lib/libfanstore_preload.so");
  EXPECT_EQ(c->srun, "/opt/slurm/bin/srun");
  EXPECT_EQ(c->local_dir, "/local/%u/%n");
  EXPECT_EQ(c->run_dir, "/run/fs");
  EXPECT_EQ(c->mount_prefix, "/data");
  EXPECT_EQ(c->stagein_timeout, 30);
  EXPECT_EQ(c->replicas, "2");
  EXPECT_TRUE(ParseConfig({"replicas=all"}).ok());
  auto sized = ParseConfig({"cache_size=20G"});
  ASSERT_TRUE(sized.ok());
  EXPECT_EQ(sized->cache_size, "20G");
  EXPECT_TRUE(c->cache_size.empty());  // the agent's own default unless the site sets one
  auto bad = ParseConfig({"cache_size=lots"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cache_size='lots'"), std::string::npos)
      << bad.status().message();
  EXPECT_TRUE(c->image);  // auto: an EROFS image where the local directory allows one
  auto files = ParseConfig({"image=no"});
  ASSERT_TRUE(files.ok());
  EXPECT_FALSE(files->image);
  EXPECT_FALSE(ParseConfig({"image=yes"}).ok());  // auto falls back by itself; yes could not
}

TEST(ConfigTest, UnknownKeyIsAHardErrorListingTheKnownOnes) {
  auto c = ParseConfig({"agent=/a", "stage_timeout=5"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unknown key 'stage_timeout'"), std::string::npos);
  EXPECT_NE(c.status().message().find("stagein_timeout"), std::string::npos);
}

TEST(ConfigTest, RejectsMalformedArguments) {
  const std::vector<std::vector<std::string>> bad = {
      {"agent"},                      // not key=value
      {"=x"},                         // no key
      {"agent=relative/path"},        // not absolute
      {"agent=/a/../b"},              // not clean
      {"agent=/a/"},                  // trailing slash
      {"agent="},                     // empty
      {"mount_prefix=/"},             // the root
      {"stagein_timeout=0"},          // out of range
      {"stagein_timeout=10s"},        // not a number
      {"stagein_timeout=999999999"},  // out of range
      {"replicas=0"},
      {"replicas=some"},
      {"drain_timeout=-1"},      // out of range
      {"drain_timeout=86401"},   // more than a day
      {"drain_timeout=5m"},      // not a number
      {"local_dir=/tmp/%x"},     // unknown sequence
      {"local_dir=/tmp/%"},      // dangling %
      {"agent=/a", "agent=/b"},  // twice
  };
  for (const auto& args : bad) EXPECT_FALSE(ParseConfig(args).ok()) << args.back();
}

TEST(ConfigTest, PathChecks) {
  EXPECT_TRUE(IsCleanAbsolutePath("/a"));
  EXPECT_TRUE(IsCleanAbsolutePath("/a/b.fs"));
  EXPECT_FALSE(IsCleanAbsolutePath("/"));
  EXPECT_FALSE(IsCleanAbsolutePath("a"));
  EXPECT_FALSE(IsCleanAbsolutePath("//a"));
  EXPECT_FALSE(IsCleanAbsolutePath("/a//b"));
  EXPECT_FALSE(IsCleanAbsolutePath("/a/./b"));
  EXPECT_FALSE(IsCleanAbsolutePath("/a/.."));
  EXPECT_TRUE(IsValidReplicas("all"));
  EXPECT_TRUE(IsValidReplicas("65535"));
  EXPECT_FALSE(IsValidReplicas("65536"));
  EXPECT_FALSE(IsValidReplicas("-1"));
  EXPECT_FALSE(IsValidReplicas(""));
}

TEST(ResolveAdminSymlinks, ResolvesTheFixedPartOnly) {
  char tmpl[] = "/tmp/fanstore-config-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string base = tmpl, real = base + "/real", link = base + "/scratch";
  ASSERT_EQ(::mkdir(real.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  Config c;
  c.local_dir = link + "/%u/%n";
  c.run_dir = link;
  ResolveAdminSymlinks(&c);
  EXPECT_EQ(c.local_dir, real + "/%u/%n");
  EXPECT_EQ(c.run_dir, real);
  c.local_dir = base + "/missing/%u";  // another node's path: kept
  ResolveAdminSymlinks(&c);
  EXPECT_EQ(c.local_dir, base + "/missing/%u");
  ASSERT_EQ(std::system(("rm -rf '" + base + "'").c_str()), 0);
}

}  // namespace
}  // namespace fanstore::spank
