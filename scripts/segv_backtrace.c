// A diagnostic for crashes on machines without a debugger (the GPU machine): preloaded, it prints
// the crashing thread's stack to stderr, then lets the signal do what it would have done.
//
//   cc -shared -fPIC -O1 -o segv_backtrace.so scripts/segv_backtrace.c
//   LD_PRELOAD=$PWD/segv_backtrace.so build/gpu/headroom ...
//
// Child processes inherit LD_PRELOAD, so c10d's workers print theirs too. Frames read
// "object(symbol+offset) [address]"; addr2line -Cfe object offset names the line in our code.
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  (void)context;
  char head[160];
  // snprintf is not async-signal-safe; the process is going down either way.
  const int n = snprintf(head, sizeof head, "\n[segv_backtrace] pid %d: signal %d (%s) at address %p\n", (int)getpid(), sig,
                         strsignal(sig), info->si_addr);
  if (n > 0) (void)!write(2, head, (size_t)n);
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
