// Tests only: a private temporary directory for one test, removed with all it holds when the
// test ends (whatever modes the test left inside).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "common/remove_tree.h"

namespace fanstore::test {

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::string tmpl = "/tmp/fanstore-" + tag + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << tmpl << " failed";
    path_ = tmpl;
  }
  ~TempDir() {
    // A test may leave directories without write or search permission.
    (void)std::system(("chmod -R u+rwx '" + path_ + "' 2>/dev/null").c_str());
    Status st = RemoveTree(path_);
    if (!st.ok()) ADD_FAILURE() << st.ToString();
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fanstore::test
