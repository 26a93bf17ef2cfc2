#include "interrupt.h"

namespace kestrel::cli {
namespace {

// sig_atomic_t: the one type a handler may write that the loop is guaranteed to read whole.
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int) {
  if (g_interrupted != 0) {
    // The first Ctrl-C has not been acted on: the user wants out now. SIGINT is blocked while
    // this handler runs, so the raised one is delivered, with the default action, on return.
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  g_interrupted = 1;
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_interrupted = 0;
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a write to stdout that the signal lands in is resumed, not lost with EINTR (chat
  // waits for input with poll(), which returns on the signal either way).
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &previous_);
  // A process started with SIGINT ignored (`kestrel run ... &` from a script: the shell shields
  // background jobs from the terminal's Ctrl-C) keeps ignoring it, as the convention is.
  if (previous_.sa_handler == SIG_IGN) sigaction(SIGINT, &previous_, nullptr);
}

InterruptGuard::~InterruptGuard() { sigaction(SIGINT, &previous_, nullptr); }

bool interrupted() { return g_interrupted != 0; }

void clear_interrupt() { g_interrupted = 0; }

}  // namespace kestrel::cli
