// Running the built `kestrel` binary from CLI tests.
//   run_kestrel("run MODEL -n 4")   through the shell, to completion: exit status, stdout, stderr.
//   KestrelProcess p({"run", ...})  a live process with pipes on stdin, stdout and stderr, for tests
//                                    that talk to it or signal it. Every wait takes a deadline, so a
//                                    hang fails the test instead of blocking CI; the destructor
//                                    kills a process still running.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "test_paths.h"

namespace kestrel::test {

inline std::string kestrel_binary() { return std::string(KESTREL_BINARY_DIR) + "/tools/kestrel"; }

struct CommandResult {
  int exit_code = -1;  // -1: did not exit normally (a signal)
  std::string out;
  std::string err;
};

// Runs `kestrel ARGS` (ARGS as a shell would split them), capturing stdout and stderr (stderr
// through a temp file).
inline CommandResult run_kestrel(const std::string& args) {
  const std::string err_path = scratch_dir("cli_stderr") + "/stderr.txt";
  const std::string command = kestrel_binary() + " " + args + " 2>" + err_path;
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = read_file(err_path);
  return result;
}

class KestrelProcess {
 public:
  using Clock = std::chrono::steady_clock;

  explicit KestrelProcess(const std::vector<std::string>& args) {
    ::signal(SIGPIPE, SIG_IGN);  // writing to a child that has exited: an error, not the test's death
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    // SIGINT as a terminal's foreground program has it, whatever the test runner left (a runner
    // started in the background of a script has it ignored, and exec keeps an ignored signal).
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t defaults, none;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    const std::string binary = kestrel_binary();
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, binary.c_str(), &actions, &attributes, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    in_ = in[1];
    out_ = out[0];
    err_ = err[0];
  }

  ~KestrelProcess() {
    close_stdin();
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (out_ >= 0) ::close(out_);
    if (err_ >= 0) ::close(err_);
  }
  KestrelProcess(const KestrelProcess&) = delete;
  KestrelProcess& operator=(const KestrelProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_text_; }
  const std::string& err() const { return err_text_; }

  void write_stdin(const std::string& text) {
    if (in_ >= 0) (void)!::write(in_, text.data(), text.size());
  }
  void close_stdin() {
    if (in_ >= 0) ::close(in_);
    in_ = -1;
  }
  void signal(int sig) {
    if (pid_ > 0 && !exited_) ::kill(pid_, sig);
  }

  // Reads stdout and stderr until `done()` holds (true) or `timeout` passes (false).
  bool read_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!done()) {
      if (Clock::now() >= deadline) return false;
      if (!pump(deadline) && !done()) return false;  // both pipes closed
    }
    return true;
  }

  // Waits for the process to exit, reading its output all the while (a child blocked on a full
  // pipe would never exit). True when it exited (status in exit_code() / term_signal()).
  bool wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!exited_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        term_signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        break;
      }
      if (r < 0 || Clock::now() >= deadline) return false;
      if (!pump(std::min(deadline, Clock::now() + std::chrono::milliseconds(50)))) {
        ::usleep(10'000);  // pipes closed, the process not yet reaped
      }
    }
    // What it wrote just before exiting.
    while (pump(Clock::now() + std::chrono::milliseconds(200))) {
    }
    return true;
  }
  int exit_code() const { return exit_code_; }
  int term_signal() const { return term_signal_; }

 private:
  // Waits until `deadline` for output and appends what comes; false when both pipes are closed.
  bool pump(Clock::time_point deadline) {
    std::vector<pollfd> fds;
    if (out_ >= 0) fds.push_back({out_, POLLIN, 0});
    if (err_ >= 0) fds.push_back({err_, POLLIN, 0});
    if (fds.empty()) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(fds.data(), fds.size(), int(std::max<long long>(0, left))) <= 0) return true;
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(p.fd, buffer, sizeof buffer);
      int& fd = p.fd == out_ ? out_ : err_;
      std::string& text = p.fd == out_ ? out_text_ : err_text_;
      if (n > 0) {
        text.append(buffer, size_t(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        ::close(fd);
        fd = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  std::string out_text_, err_text_;
  bool exited_ = false;
  int exit_code_ = -1, term_signal_ = 0;
};

}  // namespace kestrel::test
