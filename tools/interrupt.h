// Ctrl-C for `run` and `chat`: the one piece of process-wide mutable state in the CLI, because a
// signal handler can reach nothing else. The handler only sets a flag; the generation loops poll
// interrupted() between engine steps and abort their request, so the engine is never touched
// from the handler. A second Ctrl-C before the first was handled ends the process at once (killed
// by SIGINT: the shell reports 130), for a step that takes too long.
//
//   InterruptGuard guard;  // installs the handler; the destructor restores the previous one
//   while (...) { if (interrupted()) { abort; break; } step(); }
#pragma once

#include <csignal>

namespace kestrel::cli {

class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction previous_ {};
};

// Whether Ctrl-C was pressed since the guard was installed or clear_interrupt() last ran.
bool interrupted();
// The interrupt has been handled (chat stopped a reply): the next Ctrl-C counts as a first one.
void clear_interrupt();

// The exit status of a command that stopped on Ctrl-C, as a shell reports a program killed by
// SIGINT (llama.cpp's llama-cli exits with it too).
inline constexpr int kInterruptedExitStatus = 128 + SIGINT;

}  // namespace kestrel::cli
