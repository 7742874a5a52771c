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
  // Internals are hidden by the version script (a sanitizer runtime the library depends on
  // may still provide operator new: only symbols defined in the library itself count).
  for (const char* internal :
       {"_ZN8fanstore11interceptor11ResolveRealEv", "_Znwm", "_ZdlPv",
        "_ZN8fanstore5table9TableView6LookupESt17basic_string_viewIcSt11char_traitsIcEE"}) {
    void* sym = dlsym(lib, internal);
    Dl_info info;
    if (sym && dladdr(sym, &info) && info.dli_fname) {
      EXPECT_EQ(std::string(info.dli_fname).find("libfanstore_preload"), std::string::npos)
          << internal;
    }
  }
  // Not dlclose()d: libstdc++'s emergency pool inside the library would then look leaked.
}

}  // namespace
