// Resolution of the real libc functions.
#include "interceptor/real.h"

#include <dlfcn.h>

namespace fanstore::interceptor {

RealFns g_real;
bool g_real_ready = false;

const RealFns& ResolveReal() noexcept {
  RealFns r;
#define FS_SYM(ret, name, params) r.name = reinterpret_cast<ret(*) params>(dlsym(RTLD_NEXT, #name));
#include "interceptor/symbols.def"
#undef FS_SYM
  g_real = r;
  __atomic_store_n(&g_real_ready, true, __ATOMIC_RELEASE);
  return g_real;
}

}  // namespace fanstore::interceptor
