#pragma once
// Runs scenario jobs for the session (engine/session.h): each in a child process of its own (the default), up to `jobs`
// at once, with a per-scenario timeout; or in this process (--no-isolate, for a debugger). A
// child that crashes, hangs or is killed becomes a crashed record naming the signal or the
// timeout, the last step it reported and the tail of its output; the other jobs still run.
// Torch-free.

#include <csignal>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graphcheck/engine/driver.h"
#include "graphcheck/engine/record.h"
#include "graphcheck/engine/scenario.h"
#include "graphcheck/engine/session.h"

namespace graphcheck::session {

// One run of one scenario.
struct Job {
  const Scenario* scenario = nullptr;
  RunOptions options;
  double timeout = 0;       // seconds; 0: none
  std::string log_path;     // the child's stdout and stderr
  std::string record_path;  // where the child writes its record
};

struct RunnerOptions {
  bool isolate = true;
  int jobs = 1;     // children at once
  int threads = 1;  // libtorch intra-op threads in each child
};

// What the runner tells its caller, on the caller's thread.
struct RunnerEvents {
  std::function<void(std::size_t job)> started;
  // Every step of every pass (isolated: only while one job runs at a time, so lines do not mix).
  std::function<void(std::size_t job, const std::string& pass, const std::string& phase, int cycle,
                     std::int64_t batch_size)>
      step;
  std::function<void(std::size_t job, ScenarioRecord record)> done;
};

// Set from a SIGINT/SIGTERM handler: no job starts after it, running children are stopped.
extern volatile std::sig_atomic_t g_stop_signal;

// Runs the jobs; `done` is called once per job that finished (in the order they finish). Returns
// the indices of jobs stopped or never started because of a stop signal.
std::vector<std::size_t> run_jobs(const std::vector<Job>& jobs, const RunnerOptions& options,
                                  const RunnerEvents& events);

// "SIGSEGV (Segmentation fault)".
std::string signal_name(int signal);

// The environment a scenario's process runs with: `environment` (environ), with glibc's heap asking
// for transparent huge pages unless it says otherwise (Note [Huge pages for the scenario's heap]).
std::vector<std::string> scenario_environment(const char* const* environment);

}  // namespace graphcheck::session
