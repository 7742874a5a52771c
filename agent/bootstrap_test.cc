// The single-node bootstrap, and the choice of bootstrap by name.
#include "agent/bootstrap.h"

#include <stdlib.h>

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace fanstore::agent {
namespace {

// Unsets an environment variable for the test's duration.
class WithoutEnv {
 public:
  explicit WithoutEnv(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    ::unsetenv(name);
  }
  ~WithoutEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(BootstrapTest, SingleIsRankZeroOfOneAndExchangesWithItself) {
  auto b = MakeBootstrap("single");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Bootstrap& boot = **b;
  EXPECT_EQ(boot.rank(), 0u);
  EXPECT_EQ(boot.size(), 1u);
  EXPECT_EQ(boot.nspace(), "");
  // Both rounds the agent makes, each giving back exactly our own message.
  for (const std::string& mine : {std::string("first round"), std::string("\0binary\xff", 8)}) {
    bool fenced = false;
    auto all = boot.Exchange(mine, &fenced, false);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    EXPECT_EQ(*all, std::vector<std::string>{mine});
    EXPECT_TRUE(fenced);
  }
  auto again = boot.Exchange("", nullptr, true);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, std::vector<std::string>{""});
  boot.Finalize();
  boot.Finalize();  // twice is fine
}

TEST(BootstrapTest, AutoWithoutPmixIsSingle) {
  WithoutEnv rank("PMIX_RANK"), ns("PMIX_NAMESPACE");
  auto b = MakeBootstrap("auto");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->rank(), 0u);
  EXPECT_EQ((*b)->size(), 1u);
}

TEST(BootstrapTest, UnknownNameIsRefusedNamingTheChoices) {
  for (const char* name : {"mpi", "", "Single"}) {
    auto b = MakeBootstrap(name);
    ASSERT_FALSE(b.ok()) << name;
    const std::string msg = b.status().ToString();
    EXPECT_NE(msg.find("unknown bootstrap '" + std::string(name) + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("auto, single or pmix"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace fanstore::agent
