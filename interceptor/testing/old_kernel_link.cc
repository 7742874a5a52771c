// Test shim: linkat(AT_EMPTY_PATH) refused with ENOENT, as kernels before 6.10 refuse it to a
// caller without CAP_DAC_READ_SEARCH. Preloaded after the interception library, it stands
// between that library and libc, so that serve_test.sh sees clients fall back to linking their
// unpacked files through /proc/self/fd. Every other link goes to the kernel.
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" __attribute__((visibility("default"))) int linkat(int olddirfd, const char* oldpath,
                                                             int newdirfd, const char* newpath,
                                                             int flags) {
  if (flags & AT_EMPTY_PATH) {
    errno = ENOENT;
    return -1;
  }
  return static_cast<int>(::syscall(SYS_linkat, olddirfd, oldpath, newdirfd, newpath, flags));
}
