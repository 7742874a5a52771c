// The real libc functions behind every wrapper, resolved with dlsym(RTLD_NEXT).
//
// Resolution is lazy and idempotent: the first wrapper called (possibly from another
// library's constructor, before ours ran) resolves the whole table. dlsym does not call any
// wrapped function, so there is no bootstrap recursion. Thread safety: concurrent first calls
// may both resolve; they store identical values.
#pragma once

#include "common/unique_fd.h"
#include "interceptor/libc_types.h"

namespace fanstore::interceptor {

struct RealFns {
#define FS_SYM(ret, name, params) ret(*name) params;
#include "interceptor/symbols.def"
#undef FS_SYM
};

const RealFns& ResolveReal() noexcept;

// The real function table; resolves it on first use.
inline const RealFns& Real() noexcept {
  extern RealFns g_real;
  extern bool g_real_ready;
  if (__atomic_load_n(&g_real_ready, __ATOMIC_ACQUIRE)) return g_real;
  return ResolveReal();
}

// A descriptor the interceptor opened for itself, closed through libc: the exported close is
// our wrapper, which would first look the number up in the descriptor table.
struct RealClose {
  void operator()(int fd) const noexcept { Real().close(fd); }
};
using RealFD = BasicUniqueFD<RealClose>;

}  // namespace fanstore::interceptor
