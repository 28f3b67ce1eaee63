#include "session/runner.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "graphcheck/cli.h"
#include "graphcheck/plugin.h"
#include "graphcheck/engine/reporter.h"
#include "reporters/report_views.h"

namespace graphcheck::session {

volatile std::sig_atomic_t g_stop_signal = 0;

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

extern "C" void on_stop_signal(int signal) {
  if (g_stop_signal != 0) {
    // A second signal: stop now.
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_stop_signal = signal;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The last `max_bytes` of a file, cut to whole lines where it can be.
std::string file_tail(const std::string& path, std::size_t max_bytes = 3000) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > static_cast<std::streamoff>(max_bytes) ? size - static_cast<std::streamoff>(max_bytes) : 0;
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (from > 0) {
    const auto nl = text.find('\n');
    if (nl != std::string::npos && nl + 1 < text.size()) text = "…" + text.substr(nl + 1);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  // A cut in the middle of a character, or binary output, must not make the XML report invalid.
  return report::utf8_clean(text);
}

// This very binary, even when its file was replaced (rebuilt) while the run goes on.
constexpr const char* kSelf = "/proc/self/exe";


// Writes every step to the parent as "step\t<pass>\t<phase>\t<cycle>\t<batch>\n".
class StepWriter final : public ProgressListener {
 public:
  explicit StepWriter(int fd) : m_fd(fd) {}
  void on_step(const std::string& pass, const std::string& phase, int cycle, std::int64_t batch_size) override {
    if (m_fd < 0) return;
    const std::string line = fmt::format("step\t{}\t{}\t{}\t{}\n", pass, phase, cycle, batch_size);
    // One write per line (under PIPE_BUF, so it is atomic); a parent that went away is ignored.
    [[maybe_unused]] const ssize_t n = ::write(m_fd, line.data(), line.size());
  }

 private:
  int m_fd;
};

struct Child {
  std::size_t job = 0;
  pid_t pid = -1;     // also its process group
  int progress = -1;  // read end; -1 once it reached end of file
  Clock::time_point start;
  std::string pending;  // a partial progress line
  std::string last_pass, last_phase;
  int last_cycle = 0;
  bool timed_out = false;
  bool stopped = false;  // killed for a stop signal
  std::optional<Clock::time_point> killed_at;
};

ScenarioRecord base_record(const Job& job) {
  ScenarioRecord r;
  r.name = job.scenario->name;
  r.file = job.scenario->file;
  r.description = job.scenario->description;
  r.fixture = job.scenario->fixture;
  r.expected_catches = job.scenario->mutations;
  r.mutations.assign(job.options.mutations.begin(), job.options.mutations.end());
  return r;
}

// A record for a child that left none: what ended it, where it was, what it last wrote.
ScenarioRecord crashed_record(const Job& job, const Child& c, int status) {
  ScenarioRecord r = base_record(job);
  r.status = Status::crashed;
  r.seconds = since(c.start);
  CrashInfo info;
  info.last_pass = c.last_pass;
  info.last_phase = c.last_phase;
  info.last_cycle = c.last_cycle;
  info.stderr_tail = file_tail(job.log_path);
  info.log = job.log_path;
  std::string what;
  if (status == -1) {
    info.cause = "exit";
    info.exit_code = -1;
    what = "ended, but how is unknown (it was reaped elsewhere)";
  } else if (c.timed_out) {
    info.cause = "timeout";
    info.timeout = job.timeout;
    info.signal = WIFSIGNALED(status) ? signal_name(WTERMSIG(status)) : "";
    what = fmt::format("timed out after {:g} s and was killed (--timeout, or the scenario's timeout key)",
                       job.timeout);
  } else if (WIFSIGNALED(status)) {
    info.cause = "signal";
    info.signal = signal_name(WTERMSIG(status));
    what = fmt::format("was killed by {}", info.signal);
    if (WTERMSIG(status) == SIGKILL) what += " (out of memory, or killed from outside)";
  } else {
    info.cause = "exit";
    info.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    what = fmt::format("exited with code {} without writing its record", info.exit_code);
    if (info.stderr_tail.find("Sanitizer") != std::string::npos || info.stderr_tail.find("runtime error:") != std::string::npos) {
      what += " (a sanitizer report)";
    }
  }
  const std::string where =
      info.last_phase.empty()
          ? std::string("before its first phase")
          : fmt::format("in the {} pass, phase {} ({}), the last step it reported", info.last_pass, info.last_phase,
                        info.last_cycle == 0 ? std::string("initial load") : fmt::format("refit cycle {}", info.last_cycle));
  r.reason = fmt::format("the scenario's process {} {}; its output is in {}", what, where, job.log_path);
  r.crash = std::move(info);
  return r;
}

// Reads what a child's progress pipe has; returns false at end of file.
bool drain(Child& c, const RunnerEvents& events, bool forward) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(c.progress, buf, sizeof buf);
    if (n > 0) {
      c.pending.append(buf, static_cast<std::size_t>(n));
      std::size_t nl;
      while ((nl = c.pending.find('\n')) != std::string::npos) {
        const std::string line = c.pending.substr(0, nl);
        c.pending.erase(0, nl + 1);
        std::istringstream in(line);
        std::string tag, pass, phase, cycle, batch;
        if (std::getline(in, tag, '\t') && tag == "step" && std::getline(in, pass, '\t') &&
            std::getline(in, phase, '\t') && std::getline(in, cycle, '\t') && std::getline(in, batch)) {
          c.last_pass = pass;
          c.last_phase = phase;
          c.last_cycle = std::atoi(cycle.c_str());
          if (forward && events.step) events.step(c.job, pass, phase, c.last_cycle, std::atoll(batch.c_str()));
        }
      }
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return true;  // EAGAIN: nothing more for now
  }
}


Child launch(const Job& job, std::size_t index, const RunnerOptions& options,
             const std::vector<std::string>& scenario_env) {
  std::error_code ec;
  fs::create_directories(fs::path(job.log_path).parent_path(), ec);
  fs::create_directories(fs::path(job.record_path).parent_path(), ec);
  fs::remove(job.record_path, ec);
  std::vector<std::string> args = {"graphcheck",
                                   "__scenario",
                                   job.scenario->file,
                                   "--record",
                                   job.record_path,
                                   "--progress-fd",
                                   "3",
                                   "--backend",
                                   job.options.backend,
                                   "--work-dir",
                                   job.options.work_dir,
                                   "--threads",
                                   std::to_string(options.threads),
                                   "--timeout",
                                   std::to_string(job.timeout)};
  if (job.options.seed) {
    args.push_back("--seed");
    args.push_back(std::to_string(*job.options.seed));
  }
  for (const auto& m : job.options.mutations) {
    args.push_back("--mutation");
    args.push_back(m);
  }
  // The child registers the same models: it loads the plugins this process loaded.
  for (const auto& plugin : loaded_plugins()) {
    args.push_back("--plugin");
    args.push_back(plugin);
  }
  // Another host (a Python interpreter running `-m graphcheck`) runs its scenarios with its own
  // command line in place of this binary's name.
  std::vector<std::string> command = child_command();
  const std::string program = command.empty() ? std::string(kSelf) : command.front();
  if (!command.empty()) args.erase(args.begin());
  args.insert(args.begin(), command.begin(), command.end());
  if (command.empty()) args.front() = "graphcheck";
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> environment = scenario_env;
  std::vector<char*> envp;
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  // Above the numbers the child moves them to (0-3), so that no dup2() there is a no-op that
  // leaves O_CLOEXEC set or overwrites another of them.
  for (int& fd : pipefd) {
    const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
    ::close(fd);
    fd = high;
  }
  if (pipefd[0] < 0 || pipefd[1] < 0) {
    const int error = errno;
    for (int fd : pipefd) {
      if (fd >= 0) ::close(fd);
    }
    throw std::runtime_error(fmt::format("fcntl: {}", std::strerror(error)));
  }
  const int log_fd = ::open(job.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int log = log_fd < 0 ? -1 : ::fcntl(log_fd, F_DUPFD_CLOEXEC, 10);
  if (log_fd >= 0) ::close(log_fd);
  if (log < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    throw std::runtime_error(fmt::format("cannot write {}: {}", job.log_path, std::strerror(errno)));
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    ::close(log);
    if (devnull >= 0) ::close(devnull);
    throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    // Child: its own process group (a terminal's Ctrl-C goes to the parent, which stops it),
    // output to the log, steps on fd 3. Only async-signal-safe calls until exec.
    ::setpgid(0, 0);
    // Dies with the parent, whatever kills it (a hung child must not outlive the run).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::dup2(pipefd[1], 3);
    ::execve(program.c_str(), argv.data(), envp.data());
    const char msg[] = "graphcheck: exec of the scenario process failed\n";
    [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // as the child does: no race on which runs first
  ::close(pipefd[1]);
  ::close(log);
  if (devnull >= 0) ::close(devnull);
  ::fcntl(pipefd[0], F_SETFL, ::fcntl(pipefd[0], F_GETFL) | O_NONBLOCK);
  Child c;
  c.job = index;
  c.pid = pid;
  c.progress = pipefd[0];
  c.start = Clock::now();
  return c;
}

ScenarioRecord finish(const Job& job, Child& c, int status) {
  // A child that wrote its record and exited 0 finished, even if its timeout or a stop signal
  // came in the same moment.
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::ifstream in(job.record_path, std::ios::binary);
    if (in) {
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      try {
        return scenario_record_from_json(text);
      } catch (const std::exception& e) {
        ScenarioRecord r = base_record(job);
        r.status = Status::crashed;
        r.reason = fmt::format("the scenario's process wrote an unreadable record {}: {}", job.record_path, e.what());
        return r;
      }
    }
  }
  return crashed_record(job, c, status);
}

std::vector<std::size_t> run_in_process(const std::vector<Job>& jobs, const RunnerEvents& events) {
  class Forward final : public ProgressListener {
   public:
    Forward(const RunnerEvents& e, std::size_t job) : m_events(e), m_job(job) {}
    void on_step(const std::string& pass, const std::string& phase, int cycle, std::int64_t b) override {
      if (m_events.step) m_events.step(m_job, pass, phase, cycle, b);
    }

   private:
    const RunnerEvents& m_events;
    std::size_t m_job;
  };
  std::vector<std::size_t> not_run;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (g_stop_signal != 0) {
      not_run.push_back(i);
      continue;
    }
    if (events.started) events.started(i);
    Forward forward(events, i);
    ScenarioRecord r = run_scenario(*jobs[i].scenario, jobs[i].options, &forward);
    if (events.done) events.done(i, std::move(r));
  }
  return not_run;
}

}  // namespace

void install_stop_handlers() {
  // A process that runs the CLI more than once (graphcheck.check() in a test session) starts
  // each run unstopped.
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART spares an in-process scenario (--no-isolate) EINTR in its own calls; poll() in the
  // runner's loop returns EINTR regardless on Linux, and the loop looks at the flag anyway.
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_stop_signal; }

// Note [Huge pages for the scenario's heap]: a scenario process allocates and frees the model's
// bytes many times over (a model per pass, model B per cycle, checkpoints), and hands freed memory
// back to the system between phases (Note [Freed memory stays resident]), so each new model faults
// its pages in again: a fifth of the system time of a run on a model of 10,000 tensors. Where the
// kernel gives transparent huge pages on request (`madvise` mode), glibc's tunable
// glibc.malloc.hugetlb=1 asks for them for the heap: one fault per 2 MiB instead of 512. The child
// gets it in its environment unless the user set glibc.malloc.hugetlb already (an older glibc
// ignores a tunable it does not know). --no-isolate runs in this process, without it.
std::vector<std::string> scenario_environment(const char* const* environment) {
  constexpr std::string_view kTunables = "GLIBC_TUNABLES=";
  std::vector<std::string> out;
  bool tunables = false;
  for (const char* const* e = environment; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    if (entry.rfind(kTunables, 0) == 0) {
      tunables = true;
      if (entry.find("glibc.malloc.hugetlb") == std::string::npos) {
        entry += entry.size() > kTunables.size() ? ":glibc.malloc.hugetlb=1" : "glibc.malloc.hugetlb=1";
      }
    }
    out.push_back(std::move(entry));
  }
  if (!tunables) out.emplace_back("GLIBC_TUNABLES=glibc.malloc.hugetlb=1");
  return out;
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  const char* text = ::strsignal(signal);
  return fmt::format("SIG{} ({})", abbrev ? abbrev : std::to_string(signal).c_str(), text ? text : "?");
}

std::vector<std::size_t> run_jobs(const std::vector<Job>& jobs, const RunnerOptions& options,
                                  const RunnerEvents& events) {
  // Read once, here, not per child: a host's other threads (Python's os.environ) may change it
  // while children start.
  const std::vector<std::string> scenario_env = scenario_environment(environ);
  if (!options.isolate) return run_in_process(jobs, events);
  // Children must be ours to reap: an inherited SIG_IGN for SIGCHLD would have the kernel reap
  // them and waitpid() never report them.
  std::signal(SIGCHLD, SIG_DFL);
  const int parallel = std::max(1, options.jobs);
  std::vector<Child> running;
  // Whatever ends this function (an exception included) leaves no child behind.
  struct Reaper {
    std::vector<Child>& children;
    ~Reaper() {
      for (auto& c : children) {
        ::kill(-c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
        if (c.progress >= 0) ::close(c.progress);
      }
    }
  } reaper{running};
  std::vector<std::size_t> not_run;
  std::size_t next = 0;
  constexpr double kGrace = 2.0;  // seconds between SIGTERM and SIGKILL
  while (next < jobs.size() || !running.empty()) {
    if (g_stop_signal != 0) {
      for (; next < jobs.size(); ++next) not_run.push_back(next);
      for (auto& c : running) {
        if (!c.killed_at) {
          c.stopped = true;
          ::kill(-c.pid, SIGTERM);
          c.killed_at = Clock::now();
        }
      }
    }
    while (static_cast<int>(running.size()) < parallel && next < jobs.size()) {
      const std::size_t index = next++;
      if (events.started) events.started(index);
      try {
        running.push_back(launch(jobs[index], index, options, scenario_env));
      } catch (const std::exception& e) {
        // This job cannot start (no fds, no processes, an unwritable report dir): its record
        // says so, and the others go on.
        ScenarioRecord r = base_record(jobs[index]);
        r.status = Status::crashed;
        r.reason = fmt::format("the scenario's process could not be started: {}", e.what());
        if (events.done) events.done(index, std::move(r));
      }
    }
    std::vector<pollfd> fds;
    for (const auto& c : running) fds.push_back({c.progress, POLLIN, 0});  // -1: ignored
    ::poll(fds.data(), fds.size(), 50);  // EINTR on a stop signal: fine, the loop looks again
    const bool forward = parallel == 1;
    for (std::size_t k = 0; k < running.size();) {
      Child& c = running[k];
      if (c.progress >= 0 && !drain(c, events, forward)) {
        ::close(c.progress);  // end of file: stop polling it, or poll() returns at once forever
        c.progress = -1;
      }
      const Job& job = jobs[c.job];
      if (!c.killed_at && job.timeout > 0 && since(c.start) > job.timeout) {
        c.timed_out = true;
        ::kill(-c.pid, SIGKILL);  // a hung model may ignore SIGTERM
        c.killed_at = Clock::now();
      } else if (c.killed_at && since(*c.killed_at) > kGrace) {
        ::kill(-c.pid, SIGKILL);
      }
      int status = 0;
      const pid_t w = ::waitpid(c.pid, &status, WNOHANG);
      if (w == c.pid || (w < 0 && errno == ECHILD)) {
        if (w < 0) status = -1;  // reaped elsewhere: how it ended is unknown
        if (c.progress >= 0) {
          drain(c, events, forward);
          ::close(c.progress);
          c.progress = -1;
        }
        const bool wrote_record = w == c.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                                  fs::exists(job.record_path);
        if (c.stopped && !wrote_record) {
          not_run.push_back(c.job);
        } else if (events.done) {
          events.done(c.job, finish(job, c, status));
        }
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      ++k;
    }
  }
  std::sort(not_run.begin(), not_run.end());
  return not_run;
}

int run_child(const std::string& scenario_file, const RunOptions& options, int threads,
              const std::string& record_path, int progress_fd) {
  ScenarioRecord record;
  try {
    const Scenario scenario = parse_scenario_file(scenario_file, default_catalog());
    set_intra_op_threads(threads);
    StepWriter steps(progress_fd);
    record = run_scenario(scenario, options, &steps);
  } catch (const std::exception& e) {
    record.file = scenario_file;
    record.status = Status::error;
    record.reason = e.what();
  }
  try {
    write_file_atomically(record_path, scenario_record_json(record));
  } catch (const std::exception& e) {
    fmt::print(stderr, "graphcheck: cannot write the scenario record: {}\n", e.what());
    return 3;
  }
  return 0;
}

}  // namespace graphcheck::session

namespace graphcheck {

namespace {
std::vector<std::string>& child_command_slot() {
  static std::vector<std::string> command;
  return command;
}
}  // namespace

void set_child_command(std::vector<std::string> command) { child_command_slot() = std::move(command); }

std::vector<std::string> child_command() { return child_command_slot(); }

}  // namespace graphcheck
