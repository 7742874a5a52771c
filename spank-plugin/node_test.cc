// Unit tests of the node's name and the process's environment: the rule `fanstore doctor` shares
// with the plugin for %n.
#include "spank-plugin/node.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/env.h"

namespace fanstore::spank {
namespace {

// Sets SLURMD_NODENAME (or unsets it, for nullopt) for one test, and puts back what was there.
class NodeNameTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = ProcessGetenv(env::kSlurmdNodeName); }
  void TearDown() override { Set(saved_); }
  static void Set(const std::optional<std::string>& v) {
    if (v)
      ::setenv(env::kSlurmdNodeName, v->c_str(), 1);
    else
      ::unsetenv(env::kSlurmdNodeName);
  }

 private:
  std::optional<std::string> saved_;
};

TEST_F(NodeNameTest, SlurmdsNameComesFirst) {
  // Slurm's node name need not be the host's (NodeHostname=, several nodes on one host).
  Set("fs-node-7");
  auto node = NodeName();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(node.value(), "fs-node-7");
}

TEST_F(NodeNameTest, ElseTheHostNameUpToItsFirstDot) {
  Set(std::nullopt);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string h = host;
  auto node = NodeName();
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(node.value(), h.substr(0, h.find('.')));
}

TEST_F(NodeNameTest, ANameUnfitForAPathIsRefused) {
  for (const char* bad : {"", ".", "..", "a/b"}) {
    Set(bad);
    EXPECT_FALSE(NodeName().ok()) << "'" << bad << "'";
  }
}

TEST(ProcessEnvironmentTest, HoldsWhatGetenvSees) {
  ASSERT_EQ(::setenv("FANSTORE_NODE_TEST", "a=b", 1), 0);
  EXPECT_EQ(ProcessGetenv("FANSTORE_NODE_TEST"), "a=b");
  const auto all = ProcessEnvironment();
  EXPECT_NE(std::find(all.begin(), all.end(), "FANSTORE_NODE_TEST=a=b"), all.end());
  ::unsetenv("FANSTORE_NODE_TEST");
  EXPECT_EQ(ProcessGetenv("FANSTORE_NODE_TEST"), std::nullopt);
}

TEST(UserNameTest, OfThisProcess) {
  auto name = UserName(::getuid());
  ASSERT_TRUE(name.ok()) << name.status().ToString();
  EXPECT_FALSE(name.value().empty());
}

}  // namespace
}  // namespace fanstore::spank
