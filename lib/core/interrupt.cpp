#include "core/interrupt.h"

#include <atomic>
#include <csignal>
#include <cstring>

namespace fpg {
namespace {

// sig_atomic_t: the one type a handler may store to; volatile so every read sees the handler's store.
volatile std::sig_atomic_t g_signal = 0;
std::atomic<bool> g_installed{false};

extern "C" void on_interrupt(int sig) {
  if (g_signal != 0) {  // the second signal: its default action, at once
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
}

}  // namespace

ExitCode interrupted_exit_code(int signal) { return static_cast<ExitCode>(128 + signal); }

Interrupted::Interrupted(int signal, const std::string& what)
    : Error(interrupted_exit_code(signal), what), signal_(signal) {}

void install_interrupt_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes in progress go on; the work checks the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  g_installed = true;
}

bool interrupt_handlers_installed() noexcept { return g_installed; }

int interrupt_signal() noexcept { return static_cast<int>(g_signal); }

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(signal);
  }
}

std::string nothing_written(const std::string& out, bool existed) {
  return "nothing written; " + out + (existed ? " unchanged" : " not created");
}

void check_interrupt() {
  if (const int s = interrupt_signal()) throw Interrupted(s, kInterruptedStopped);
}

}  // namespace fpg
