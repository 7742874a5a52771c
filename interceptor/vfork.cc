// vfork: the one wrapper that cannot be a C function. The child returns from vfork on the
// parent's stack and goes on to call other functions, overwriting any frame a C wrapper had,
// so the wrapper keeps its return address in a register across the system call, as glibc's
// own vfork does. It records in the calling thread's TLS whether this is the child (which
// shares that TLS block with the suspended parent thread); the parent resets the flag when it
// resumes. InVforkChild() is then one TLS load instead of a getpid() per close.
#include "interceptor/state.h"

#if FANSTORE_VFORK_WRAPPER
#include <errno.h>

extern "C" {
__thread bool fanstore_t_vfork_child = false;

// The error path of the assembly below (parent side, no child exists).
__attribute__((visibility("hidden"), used)) pid_t fanstore_vfork_failed(long neg_errno) {
  errno = static_cast<int>(-neg_errno);
  return -1;
}
}

// pid_t vfork(void): SYS_vfork (58) with the return address in %rdi (caller-saved, and vfork
// takes no argument); sete stores 1 in the child (%rax == 0) and 0 in the parent.
asm(R"(
  .text
  .globl vfork
  .type vfork, @function
  .p2align 4
vfork:
  .cfi_startproc
  endbr64
  popq %rdi
  .cfi_adjust_cfa_offset -8
  .cfi_register %rip, %rdi
  movl $58, %eax
  syscall
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  .cfi_rel_offset %rip, 0
  movq fanstore_t_vfork_child@gottpoff(%rip), %rdx
  cmpq $-4095, %rax
  jae 1f
  testq %rax, %rax
  sete %fs:(%rdx)
  ret
1:
  movb $0, %fs:(%rdx)
  movq %rax, %rdi
  jmp fanstore_vfork_failed
  .cfi_endproc
  .size vfork, .-vfork
  .globl __vfork
  .set __vfork, vfork
)");
#endif
