// Every wrapped symbol exists in this libc, and the preload library exports exactly the
// wrappers, each distinct from libc's function.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

const std::vector<std::string>& Symbols() {
  static const std::vector<std::string> names = {
#define FS_SYM(ret, name, params) #name,
#include "interceptor/symbols.def"
#undef FS_SYM
  };
  return names;
}

TEST(Symbols, EveryWrappedSymbolResolvesInLibc) {
  EXPECT_GT(Symbols().size(), 100u);
  for (const std::string& name : Symbols()) {
    EXPECT_NE(dlsym(RTLD_NEXT, name.c_str()), nullptr) << name << ": " << dlerror();
    EXPECT_NE(dlsym(RTLD_DEFAULT, name.c_str()), nullptr) << name;
  }
}

TEST(Symbols, PreloadLibraryExportsTheWrappersOnly) {
  // Without FANSTORE_* variables the library is inert, so loading it here is harmless.
  void* lib = dlopen(FANSTORE_PRELOAD_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  for (const std::string& name : Symbols()) {
    void* ours = dlsym(lib, name.c_str());
    ASSERT_NE(ours, nullptr) << name;
    EXPECT_NE(ours, dlsym(RTLD_DEFAULT, name.c_str())) << name;
  }
  // Internals are hidden by the version script.
  EXPECT_EQ(dlsym(lib, "_ZN8fanstore11interceptor11ResolveRealEv"), nullptr);
  EXPECT_EQ(dlsym(lib, "_ZN8fanstore5table9TableView4OpenERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"),
            nullptr);
  EXPECT_EQ(dlsym(lib, "_Znwm"), nullptr);  // the static libstdc++ too
  dlclose(lib);
}

}  // namespace
