// A diagnostic for crashes on machines without a debugger (the GPU machine): preloaded, it prints
// the crashing thread's stack to stderr, then lets the signal do what it would have done.
//
//   cc -shared -fPIC -O1 -o segv_backtrace.so scripts/segv_backtrace.c
//   LD_PRELOAD=$PWD/segv_backtrace.so build/gpu/headroom ...
//
// Child processes inherit LD_PRELOAD, so c10d's workers print theirs too. Frames read
// "object(symbol+offset) [address]"; addr2line -Cfe object offset names the line in our code.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdint.h>
#include <ucontext.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  char head[160];
  // snprintf is not async-signal-safe; the process is going down either way.
  const int n = snprintf(head, sizeof head, "\n[segv_backtrace] pid %d: signal %d (%s) at address %p\n", (int)getpid(), sig,
                         strsignal(sig), info->si_addr);
  if (n > 0) (void)!write(2, head, (size_t)n);
  // A call through a null pointer leaves nothing to unwind from: the caller is the return address
  // on top of the stack.
  const ucontext_t* uc = (const ucontext_t*)context;
  void* pc = (void*)uc->uc_mcontext.gregs[REG_RIP];
  void* const* sp = (void* const*)uc->uc_mcontext.gregs[REG_RSP];
  if (pc == NULL && sp != NULL) {
    Dl_info where;
    void* caller = sp[0];
    if (dladdr(caller, &where) && where.dli_fname != NULL) {
      const int m = snprintf(head, sizeof head, "[segv_backtrace] called through a null pointer from %s(+%#lx)\n",
                             where.dli_fname, (unsigned long)((uintptr_t)caller - (uintptr_t)where.dli_fbase));
      if (m > 0) (void)!write(2, head, (size_t)m);
      backtrace_symbols_fd(&caller, 1, 2);
    }
    // And the words further up the stack that point into code: a likely chain of callers.
    (void)!write(2, "[segv_backtrace] code addresses on the stack:\n", 46);
    int found = 0;
    for (int i = 1; i < 512 && found < 24; ++i) {
      Dl_info w;
      if (dladdr(sp[i], &w) && w.dli_fname != NULL && w.dli_sname != NULL) {
        backtrace_symbols_fd((void* const*)&sp[i], 1, 2);
        ++found;
      }
    }
  }
  void* frames[64];
  const int count = backtrace(frames, 64);
  backtrace_symbols_fd(frames, count, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  static char stack[1 << 16];  // a handler stack: a crash may come from an overflowed one
  stack_t alt = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
  sigaltstack(&alt, NULL);
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_fatal_signal;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  const int signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
  for (size_t i = 0; i < sizeof signals / sizeof signals[0]; ++i) sigaction(signals[i], &action, NULL);
}
