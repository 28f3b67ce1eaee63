// graphcheck CLI: run scenarios, list what this binary knows, inspect checkpoints.
// Exit codes: 0 all passed, 1 a check failed, 2 bad usage / scenario / checkpoint, 3 harness failure.

#include <fcntl.h>
#include <fnmatch.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <iostream>
#include <set>

#include "fingerprint.h"
#include "graphcheck/backend.h"
#include "graphcheck/cli.h"
#include "graphcheck/compare.h"
#include "graphcheck/driver.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "graphcheck/plugin.h"
#include "graphcheck/probe.h"
#include "graphcheck/reporter.h"
#include "graphcheck/safetensors.h"
#include "graphcheck/scenario.h"
#include "scenario_runner.h"

#if defined(GRAPHCHECK_SANITIZE)
// A sanitizer report is a harness failure (exit 3), not "a check failed" (ASan's default 1).
extern "C" const char* __asan_default_options() { return "exitcode=3:detect_leaks=1"; }
extern "C" const char* __ubsan_default_options() { return "exitcode=3:print_stacktrace=1:halt_on_error=1"; }
extern "C" const char* __lsan_default_options() { return "exitcode=3"; }
#endif

namespace gc = graphcheck;
namespace fs = std::filesystem;

namespace {

constexpr int kExitPassed = 0;
constexpr int kExitUsage = 2;
constexpr int kExitHarness = 3;

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// ---- reports ------------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Where a run's reports go: each path given, or REPORT_DIR/<default name>; "-" leaves one out.
struct ReportPaths {
  std::string json, junit, markdown, html, trace;

  void add_options(CLI::App* app, const std::string& stem, const std::string& junit_name) {
    app->add_option("--json", json, fmt::format("JSON report path (default REPORT_DIR/{}.json; '-': none)", stem));
    app->add_option("--junit", junit, fmt::format("JUnit XML path (default REPORT_DIR/{}; '-': none)", junit_name));
    app->add_option("--markdown", markdown,
                    fmt::format("Markdown summary for a PR comment or a CI job summary, e.g. "
                                "\"$GITHUB_STEP_SUMMARY\" (default REPORT_DIR/{}.md; '-': none)",
                                stem));
    app->add_option("--html", html,
                    fmt::format("Self-contained HTML report with memory and timing charts (default "
                                "REPORT_DIR/{}.html; '-': none)",
                                stem));
    app->add_option("--trace", trace,
                    fmt::format("Chrome trace-event JSON of every pass and phase, for Perfetto or "
                                "chrome://tracing (default REPORT_DIR/{}-trace.json; '-': none)",
                                stem));
  }

  // Fills in the defaults and adds a reporter for each path kept.
  void add_reporters(gc::ReporterMux& mux, const std::string& report_dir, const std::string& stem,
                     const std::string& junit_name) {
    auto resolve = [&](std::string& path, const std::string& name) {
      if (path.empty()) path = (fs::path(report_dir) / name).string();
    };
    resolve(json, stem + ".json");
    resolve(junit, junit_name);
    resolve(markdown, stem + ".md");
    resolve(html, stem + ".html");
    resolve(trace, stem + "-trace.json");
    if (json != "-") mux.add(std::make_unique<gc::JsonReporter>(json));
    if (junit != "-") mux.add(std::make_unique<gc::JunitReporter>(junit));
    if (markdown != "-") mux.add(std::make_unique<gc::MarkdownReporter>(markdown));
    if (html != "-") mux.add(std::make_unique<gc::HtmlReporter>(html));
    if (trace != "-") mux.add(std::make_unique<gc::TraceReporter>(trace));
  }

  [[nodiscard]] std::string written() const {
    std::vector<std::string> kept;
    for (const auto* p : {&json, &junit, &markdown, &html, &trace}) {
      if (*p != "-") kept.push_back(*p);
    }
    return fmt::format("{}", fmt::join(kept, " "));
  }
};

// Whether the reports are due for an intermediate rewrite. Each rewrite renders the whole run
// so far, so rewriting after every scenario costs time quadratic in the number of scenarios;
// this keeps rewrites at least a second apart and at most about a tenth of the run's time. The
// first finished scenario is always written, and the final reports always are.
class RewriteThrottle {
 public:
  [[nodiscard]] bool due() const {
    return !m_last || seconds_since(*m_last) >= std::max(1.0, 10 * m_cost);
  }
  template <class Write>
  void write(Write&& write) {
    const auto t0 = std::chrono::steady_clock::now();
    write();
    m_cost = seconds_since(t0);
    m_last = std::chrono::steady_clock::now();
  }

 private:
  std::optional<std::chrono::steady_clock::time_point> m_last;
  double m_cost = 0;  // seconds the last rewrite took
};

// Writes the cumulative reports; false (after saying why) when one cannot be written.
bool write_reports(gc::Reporter& reporters, const gc::RunRecord& run) {
  try {
    reporters.on_run_done(run);
    return true;
  } catch (const std::exception& e) {
    fmt::print(stderr, "graphcheck: writing reports failed: {}\n", e.what());
    return false;
  }
}

// ---- run ----------------------------------------------------------------------------------

// Seconds a scenario's process may run when neither --timeout nor its timeout key says.
constexpr double kDefaultTimeout = 900;

// How scenarios execute: shared by run and mutants.
struct ExecArgs {
  std::string backend = "auto";
  std::optional<std::uint64_t> seed;
  std::string report_dir = "reports/out";
  int threads = 1;
  bool no_isolate = false;
  int jobs = 1;
  std::optional<double> timeout;  // given: wins over the scenario's timeout key
  int repeat = 1;
  std::optional<int> shard_index, total_shards;

  void add_options(CLI::App* app) {
    app->add_option("--backend", backend, "Graph backend: auto, emulated or cuda")
        ->check(CLI::IsMember({"auto", "emulated", "cuda"}));
    app->add_option("--threads", threads,
                    "libtorch intra-op threads (0: libtorch's default, one per core). The default 1 "
                    "suits a shared CI machine: the scenarios are small, and threads that outnumber "
                    "free cores make them several times slower")
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
    app->add_flag("--no-isolate", no_isolate,
                  "Run the scenarios in this process instead of one child process each (for a "
                  "debugger; a crash then ends the run, and --timeout and -j do not apply)");
    app->add_option("-j,--jobs", jobs, "Scenarios run at once, each in its own process")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    app->add_option("--timeout", timeout,
                    fmt::format("Seconds a scenario may run before its process is killed and it is "
                                "reported as crashed (0: no limit). Default: the scenario's timeout "
                                "key, else {:g}",
                                kDefaultTimeout))
        ->check(CLI::Range(0.0, 1e7));
    app->add_option("--repeat", repeat,
                    "Run each scenario N times; a check whose outcome changes between runs is a "
                    "finding (flaky)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000));
    app->add_option("--shard-index", shard_index,
                    "Run only the scenarios of shard I (0-based) of --total-shards; default "
                    "$GTEST_SHARD_INDEX")
        ->check(CLI::NonNegativeNumber);
    app->add_option("--total-shards", total_shards,
                    "Split the scenario list (sorted by file) into N shards, round robin; default "
                    "$GTEST_TOTAL_SHARDS")
        ->check(CLI::PositiveNumber);
  }
};

// The shard this process runs: flags first, then GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS. False
// (after saying why) on an impossible pair.
bool resolve_shard(const ExecArgs& args, int& index, int& total) {
  auto env = [](const char* name) -> std::optional<int> {
    const char* v = std::getenv(name);
    if (!v || !*v) return std::nullopt;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end != '\0' || x < 0 || x > 1'000'000) return -1;
    return static_cast<int>(x);
  };
  const std::optional<int> i = args.shard_index ? args.shard_index : env("GTEST_SHARD_INDEX");
  const std::optional<int> n = args.total_shards ? args.total_shards : env("GTEST_TOTAL_SHARDS");
  if (!i && !n) {
    index = 0;
    total = 1;
    return true;
  }
  if (!i || !n || *i < 0 || *n < 1 || *i >= *n) {
    fmt::print(stderr,
               "graphcheck: shard index {} of {} total shards is not a shard: give both --shard-index I "
               "and --total-shards N (or GTEST_SHARD_INDEX and GTEST_TOTAL_SHARDS) with 0 <= I < N\n",
               i ? std::to_string(*i) : "(none)", n ? std::to_string(*n) : "(none)");
    return false;
  }
  index = *i;
  total = *n;
  // The gtest sharding protocol: say that this program knows it.
  if (const char* status = std::getenv("GTEST_SHARD_STATUS_FILE"); status && *status) {
    std::FILE* f = std::fopen(status, "a");
    if (f) std::fclose(f);
  }
  return true;
}

// Keeps the scenarios of one shard: the i-th of the sorted list goes to shard i mod N.
void keep_shard(std::vector<gc::Scenario>& scenarios, int index, int total) {
  if (total <= 1) return;
  std::vector<gc::Scenario> kept;
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(total)) == index) kept.push_back(std::move(scenarios[i]));
  }
  scenarios = std::move(kept);
}

// One record to produce: a scenario with some mutations, or a row skipped for a stated reason.
struct Planned {
  const gc::Scenario* scenario = nullptr;
  std::set<std::string> mutations;
  std::string skip;  // non-empty: recorded as skipped
};

// Runs a plan: each item `repeat` times (isolated, -j, timeout), merged; calls `done(i, record)`
// as each item completes. Returns the items stopped or never started by a stop signal.
std::vector<std::size_t> execute(const std::vector<Planned>& plan, const ExecArgs& args,
                                 gc::ProgressListener* console,
                                 const std::function<void(std::size_t, gc::ScenarioRecord)>& done) {
  const auto repeat = static_cast<std::size_t>(args.repeat);
  std::vector<gc::cli::Job> jobs;
  std::vector<std::size_t> job_item;  // job -> plan item
  for (std::size_t i = 0; i < plan.size(); ++i) {
    if (!plan[i].skip.empty()) continue;
    for (std::size_t r = 0; r < repeat; ++r) {
      gc::cli::Job job;
      job.scenario = plan[i].scenario;
      job.options.backend = args.backend;
      job.options.seed = args.seed;
      job.options.mutations = plan[i].mutations;
      job.options.work_dir = (fs::path(args.report_dir) / "work").string();
      job.timeout = args.timeout ? *args.timeout : plan[i].scenario->timeout > 0 ? plan[i].scenario->timeout : kDefaultTimeout;
      const fs::path dir = fs::path(job.options.work_dir) / plan[i].scenario->name;
      const std::string tag = fmt::format("run-{}{}", i, repeat > 1 ? fmt::format("-{}", r + 1) : "");
      job.log_path = (dir / (tag + ".log")).string();
      job.record_path = (dir / (tag + ".record.json")).string();
      jobs.push_back(std::move(job));
      job_item.push_back(i);
    }
  }
  // Skipped rows are done at once.
  for (std::size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].skip.empty()) continue;
    gc::ScenarioRecord r;
    r.name = plan[i].scenario->name;
    r.file = plan[i].scenario->file;
    r.fixture = plan[i].scenario->fixture;
    r.mutations.assign(plan[i].mutations.begin(), plan[i].mutations.end());
    r.status = gc::Status::skipped;
    r.reason = "skipped: " + plan[i].skip;
    if (console) console->on_scenario_done(r);
    done(i, std::move(r));
  }
  std::map<std::size_t, std::vector<gc::ScenarioRecord>> partial;  // item -> its repeats so far
  std::map<std::size_t, double> started_at;
  const auto t0 = std::chrono::steady_clock::now();
  int announced = 0;
  const int runnable = static_cast<int>(jobs.size() / repeat);
  gc::cli::RunnerEvents events;
  events.started = [&](std::size_t job) {
    const std::size_t item = job_item[job];
    if (started_at.count(item)) return;
    started_at[item] = seconds_since(t0);
    if (console) console->on_scenario_start(*plan[item].scenario, announced, runnable);
    ++announced;
  };
  events.step = [&](std::size_t job, const std::string& pass, const std::string& phase, int cycle, std::int64_t b) {
    if (console && pass == "observe" && (job % repeat) == 0) console->on_phase(phase, cycle, b);
  };
  events.done = [&](std::size_t job, gc::ScenarioRecord record) {
    const std::size_t item = job_item[job];
    auto& runs = partial[item];
    runs.push_back(std::move(record));
    if (runs.size() < repeat) return;
    gc::ScenarioRecord merged = gc::merge_repeats(std::move(runs));
    partial.erase(item);
    merged.start = started_at[item];
    if (console) console->on_scenario_done(merged);
    done(item, std::move(merged));
  };
  gc::cli::RunnerOptions options;
  options.isolate = !args.no_isolate;
  options.jobs = args.jobs;
  options.threads = args.threads;
  std::set<std::size_t> stopped;
  for (std::size_t job : gc::cli::run_jobs(jobs, options, events)) stopped.insert(job_item[job]);
  return {stopped.begin(), stopped.end()};
}

// The run record's header, and the reports it is streamed to.
gc::RunRecord new_run(const ExecArgs& args, int shard_index, int total_shards) {
  gc::RunRecord run;
  run.tool_version = GRAPHCHECK_VERSION;
  run.started_at = now_iso8601();
  run.threads = gc::set_intra_op_threads(args.threads);
  run.environment = gc::run_environment(args.backend);
  run.isolated = !args.no_isolate;
  run.jobs = args.no_isolate ? 1 : args.jobs;
  run.shard_index = shard_index;
  run.total_shards = total_shards;
  run.complete = false;
  return run;
}

std::string stop_reason(int signal, std::size_t finished, std::size_t total,
                        const std::vector<std::string>& not_run) {
  return fmt::format("stopped by {} after {} of {} runs finished; not run or stopped while running: {}",
                     gc::cli::signal_name(signal), finished, total, fmt::join(not_run, ", "));
}

struct RunArgs {
  std::vector<std::string> paths;
  std::string filter;
  std::vector<std::string> mutations;
  bool verbose = false;
  ExecArgs exec;
  ReportPaths reports;
};

std::vector<gc::Scenario> load_scenarios(const std::vector<std::string>& paths, bool& ok) {
  ok = true;
  std::vector<gc::Scenario> scenarios;
  std::vector<std::string> files;
  try {
    files = gc::collect_scenario_files(paths);
  } catch (const gc::ScenarioError& e) {
    fmt::print(stderr, "graphcheck: {}\n", e.what());
    ok = false;
    return {};
  }
  if (files.empty()) {
    fmt::print(stderr, "graphcheck: no scenario files (*.yaml) under {}\n", fmt::join(paths, ", "));
    ok = false;
    return {};
  }
  const gc::ScenarioCatalog catalog = gc::default_catalog();
  // Files named on the command line, as against found in a directory.
  std::set<std::string> named;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) named.insert(fs::path(p).lexically_normal().string());
  }
  std::vector<std::string> other_front;
  for (const auto& file : files) {
    try {
      scenarios.push_back(gc::parse_scenario_file(file, catalog));
    } catch (const gc::ScenarioNeedsFront& e) {
      if (named.count(fs::path(file).lexically_normal().string())) {
        fmt::print(stderr, "graphcheck: {}\n", e.what());
        ok = false;
      } else {
        other_front.push_back(file);
      }
    } catch (const gc::ScenarioError& e) {
      fmt::print(stderr, "graphcheck: {}\n", e.what());
      ok = false;
    }
  }
  if (!other_front.empty()) {
    fmt::print(stderr,
               "graphcheck: note: {} scenario file{} name{} Python models, which this program does not "
               "run: `python -m graphcheck run` runs them ({})\n",
               other_front.size(), other_front.size() == 1 ? "" : "s", other_front.size() == 1 ? "s" : "",
               fmt::join(other_front, ", "));
    if (scenarios.empty() && ok) {
      fmt::print(stderr, "graphcheck: no C++ scenario left to run under {}\n", fmt::join(paths, ", "));
      ok = false;
    }
  }
  return scenarios;
}

// Keeps the scenarios whose name matches the glob; false (after saying so) when none does.
bool filter_scenarios(std::vector<gc::Scenario>& scenarios, const std::string& filter) {
  if (filter.empty()) return true;
  std::vector<gc::Scenario> kept;
  for (auto& s : scenarios) {
    if (fnmatch(filter.c_str(), s.name.c_str(), 0) == 0) kept.push_back(std::move(s));
  }
  if (kept.empty()) {
    fmt::print(stderr, "graphcheck: --filter '{}' matches no scenario\n", filter);
    return false;
  }
  scenarios = std::move(kept);
  return true;
}

// Which backend runs, and why, before anything else: an unavailable one is a usage error.
bool announce_backend(const std::string& name) {
  try {
    const gc::BackendChoice choice = gc::make_backend(name);
    fmt::print("graphcheck {}: backend {} ({})\n", GRAPHCHECK_VERSION, choice.backend->name(),
               choice.reason);
    return true;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "graphcheck: {}\n", e.what());
    return false;
  }
}

// Scenarios to run: loaded, filtered, sharded; false (after saying why) when there are none.
bool select_scenarios(const std::vector<std::string>& given, const std::string& filter, const ExecArgs& exec,
                      std::vector<gc::Scenario>& scenarios, int& shard_index, int& total_shards) {
  bool ok = true;
  const std::vector<std::string> paths = given.empty() ? std::vector<std::string>{"scenarios"} : given;
  scenarios = load_scenarios(paths, ok);
  if (!ok || !filter_scenarios(scenarios, filter) || !resolve_shard(exec, shard_index, total_shards)) return false;
  const std::size_t before = scenarios.size();
  keep_shard(scenarios, shard_index, total_shards);
  if (total_shards > 1) {
    fmt::print("shard {} of {}: {} of {} scenarios\n", shard_index, total_shards, scenarios.size(), before);
  }
  return true;
}

int cmd_run(const RunArgs& args) {
  std::vector<gc::Scenario> scenarios;
  int shard_index = 0, total_shards = 1;
  if (!select_scenarios(args.paths, args.filter, args.exec, scenarios, shard_index, total_shards)) return kExitUsage;
  for (const auto& name : args.mutations) {
    if (!gc::mutation::find(name)) {
      std::vector<std::string> names;
      for (const auto& m : gc::mutation::all()) names.push_back(m.name);
      fmt::print(stderr, "graphcheck: unknown mutation '{}': known mutations are {}\n", name,
                 fmt::join(names, ", "));
      return kExitUsage;
    }
  }
  if (!announce_backend(args.exec.backend)) return kExitUsage;

  std::vector<Planned> plan;
  int runnable = 0;
  for (const auto& s : scenarios) {
    Planned p;
    p.scenario = &s;
    for (const auto& name : args.mutations) {
      const gc::mutation::Info* info = gc::mutation::find(name);
      if (!gc::mutation::applies_to(*info, s.fixture)) {
        p.skip = fmt::format("mutation '{}' belongs to fixture '{}', not '{}'", name, info->owner, s.fixture);
      }
      p.mutations.insert(name);
    }
    runnable += p.skip.empty();
    plan.push_back(std::move(p));
  }

  gc::ConsoleReporter console(std::cout, args.verbose);
  gc::ReporterMux files;
  ReportPaths paths_out = args.reports;
  paths_out.add_reporters(files, args.exec.report_dir, "graphcheck", "junit.xml");
  gc::RunRecord run = new_run(args.exec, shard_index, total_shards);
  fmt::print("libtorch intra-op threads: {}; {}\n", run.threads,
             run.isolated ? fmt::format("each scenario in its own process, {} at once, timeout {}", run.jobs,
                                        !args.exec.timeout ? fmt::format("{:g} s unless a scenario sets one", kDefaultTimeout)
                                        : *args.exec.timeout > 0 ? fmt::format("{:g} s", *args.exec.timeout)
                                                                 : std::string("none"))
                          : std::string("in this process (--no-isolate)"));
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::optional<gc::ScenarioRecord>> records(plan.size());
  bool writable = true;
  // Reports are rewritten as scenarios finish (throttled), marked incomplete until the run ends.
  RewriteThrottle throttle;
  // `last`: the run's final reports, written whatever the throttle says.
  auto publish = [&](bool complete, bool last) {
    if (!last && !throttle.due()) return;
    run.scenarios.clear();
    for (const auto& r : records) {
      if (r) run.scenarios.push_back(*r);
    }
    run.complete = complete;
    run.seconds = seconds_since(start);
    throttle.write([&] { writable = write_reports(files, run) && writable; });
  };
  gc::cli::install_stop_handlers();
  const std::vector<std::size_t> stopped =
      execute(plan, args.exec, &console, [&](std::size_t i, gc::ScenarioRecord r) {
        records[i] = std::move(r);
        publish(false, false);
      });
  const int signal = gc::cli::g_stop_signal;
  if (signal != 0) {
    std::vector<std::string> names;
    for (std::size_t i : stopped) names.push_back(plan[i].scenario->name);
    run.incomplete_reason = stop_reason(signal, plan.size() - stopped.size(), plan.size(), names);
  }
  publish(signal == 0, true);
  console.on_run_done(run);
  if (!writable) return kExitHarness;
  fmt::print("reports: {}\n", paths_out.written());
  if (signal != 0) {
    fmt::print(stderr, "graphcheck: {}\n", run.incomplete_reason);
    return 128 + signal;
  }
  if (plan.empty() && total_shards > 1) {
    fmt::print("shard {} of {} holds no scenario: nothing to run\n", shard_index, total_shards);
    return kExitPassed;
  }
  if (runnable == 0) {
    fmt::print(stderr, "graphcheck: no scenario could run with the mutations given\n");
    return kExitUsage;
  }
  return run.exit_code();
}

// ---- mutants ------------------------------------------------------------------------------

struct MutantsArgs {
  std::vector<std::string> paths;
  std::string filter;
  ExecArgs exec;
  ReportPaths reports;
};

// Runs every scenario clean and with each mutation it declares; the kill matrix is data in the
// run record (every report holds it) and is printed row by row as it is computed.
int cmd_mutants(const MutantsArgs& args) {
  const bool whole_suite = args.paths.empty() && args.filter.empty();
  std::vector<gc::Scenario> scenarios;
  int shard_index = 0, total_shards = 1;
  if (!select_scenarios(args.paths, args.filter, args.exec, scenarios, shard_index, total_shards)) return kExitUsage;
  if (!announce_backend(args.exec.backend)) return kExitUsage;

  // Each scenario clean, then with each mutation it declares.
  std::vector<Planned> plan;
  std::vector<std::string> plan_mutation;  // "" for the clean run
  std::vector<std::size_t> plan_clean;     // the item of the scenario's clean run
  std::set<std::string> declared_anywhere;
  for (const auto& s : scenarios) {
    const std::size_t clean = plan.size();
    plan.push_back({&s, {}, ""});
    plan_mutation.push_back("");
    plan_clean.push_back(clean);
    for (const auto& [mutation, declared] : s.mutations) {
      declared_anywhere.insert(mutation);
      Planned p{&s, {mutation}, ""};
      const gc::mutation::Info* info = gc::mutation::find(mutation);
      if (!gc::mutation::applies_to(*info, s.fixture)) p.skip = fmt::format("the mutation belongs to fixture '{}'", info->owner);
      plan.push_back(std::move(p));
      plan_mutation.push_back(mutation);
      plan_clean.push_back(clean);
    }
  }

  gc::KillMatrix matrix;
  matrix.probes = gc::ProbeRegistry::get().names();
  matrix.probes.push_back("driver");
  gc::ReporterMux files;
  ReportPaths paths_out = args.reports;
  paths_out.add_reporters(files, args.exec.report_dir, "mutants", "mutants-junit.xml");
  gc::RunRecord run = new_run(args.exec, shard_index, total_shards);
  const auto start = std::chrono::steady_clock::now();

  fmt::print("{}\n", gc::kill_matrix_header(matrix));
  fmt::print("(a cell names the pass whose finding killed the mutation; a probe is credited only "
             "with findings from its own passes, where no other check disturbs the run)\n");
  std::vector<std::optional<gc::ScenarioRecord>> records(plan.size());
  std::vector<std::set<std::string>> clean_failed(plan.size());
  std::size_t next_row = 0;  // rows are judged and printed in plan order
  bool writable = true;
  RewriteThrottle throttle;
  // `last`: the run's final reports, written whatever the throttle says.
  auto publish = [&](bool complete, bool last) {
    if (!last && !throttle.due()) return;
    run.kill_matrix = matrix;
    run.complete = complete;
    run.seconds = seconds_since(start);
    throttle.write([&] { writable = write_reports(files, run) && writable; });
  };
  // In plan order up to the first unfinished run; `all`: past it too (a stopped run), each row
  // whose clean run finished.
  auto add_rows = [&](bool all) {
    for (; next_row < plan.size(); ++next_row) {
      if (!records[next_row] || (!plan_mutation[next_row].empty() && !records[plan_clean[next_row]])) {
        if (all) continue;
        break;
      }
      gc::ScenarioRecord& r = *records[next_row];
      const std::string& mutation = plan_mutation[next_row];
      gc::KillMatrixRow row;
      if (mutation.empty()) {
        clean_failed[next_row] = r.failed_probes();
        row = gc::kill_matrix_row(matrix, r, "", {});
      } else if (!plan[next_row].skip.empty()) {
        row.scenario = r.name;
        row.mutation = mutation;
        row.verdict = "FAIL: " + plan[next_row].skip;
      } else {
        // The verdict again, now net of what the clean run already failed.
        const auto& clean = clean_failed[plan_clean[next_row]];
        r.verdicts = {gc::judge_mutation(r, mutation, clean)};
        row = gc::kill_matrix_row(matrix, r, mutation, clean);
      }
      if (!row.ok()) {
        matrix.problems.push_back(fmt::format("{} {}: {}", row.scenario, mutation.empty() ? "(clean)" : mutation, row.verdict));
      }
      fmt::print("{}\n", gc::kill_matrix_line(matrix, row));
      std::cout.flush();
      matrix.rows.push_back(std::move(row));
      if (plan[next_row].skip.empty()) run.scenarios.push_back(r);
    }
  };
  gc::cli::install_stop_handlers();
  const std::vector<std::size_t> stopped = execute(plan, args.exec, nullptr, [&](std::size_t i, gc::ScenarioRecord r) {
    records[i] = std::move(r);
    add_rows(false);
    publish(false, false);
  });
  const int signal = gc::cli::g_stop_signal;
  if (signal != 0) {
    add_rows(true);
    std::vector<std::string> names;
    for (std::size_t i : stopped) {
      names.push_back(plan_mutation[i].empty() ? plan[i].scenario->name + " (clean)"
                                               : plan[i].scenario->name + " " + plan_mutation[i]);
    }
    run.incomplete_reason = stop_reason(signal, plan.size() - stopped.size(), plan.size(), names);
  } else if (whole_suite && total_shards == 1) {
    for (const auto& m : gc::mutation::all()) {
      if (declared_anywhere.count(m.name)) continue;
      const std::string problem =
          fmt::format("mutation {} is declared by no scenario: no probe is shown to catch it", m.name);
      fmt::print("{}\n", problem);
      matrix.problems.push_back(problem);
    }
  }
  publish(signal == 0, true);
  if (!writable) return kExitHarness;
  fmt::print("\n{} runs, {} problems ({:.1f} s); reports: {}\n", run.scenarios.size(), matrix.problems.size(),
             run.seconds, paths_out.written());
  if (signal != 0) {
    fmt::print(stderr, "graphcheck: {}\n", run.incomplete_reason);
    return 128 + signal;
  }
  if (run.count(gc::Status::crashed)) return kExitHarness;
  return matrix.problems.empty() ? kExitPassed : 1;
}

// ---- compare ------------------------------------------------------------------------------

int cmd_compare(const std::string& base, const std::string& now, const gc::CompareOptions& options,
                const std::string& markdown) {
  gc::Comparison comparison;
  try {
    comparison = gc::compare_report_files(base, now, options);
  } catch (const gc::ReportError& e) {
    fmt::print(stderr, "graphcheck compare: {}\n", e.what());
    return kExitUsage;
  }
  const std::string md = gc::comparison_markdown(comparison);
  fmt::print("{}", md);
  if (!markdown.empty()) {
    try {
      gc::write_file_atomically(markdown, md);
    } catch (const std::exception& e) {
      fmt::print(stderr, "graphcheck compare: {}\n", e.what());
      return kExitHarness;
    }
  }
  return comparison.regressed() ? 1 : kExitPassed;
}

// ---- list ---------------------------------------------------------------------------------

// A fixture's config keys and their defaults: the keys its constructor asks for when given none.
// A fixture whose construction fails with its defaults says so instead.
struct FixtureInfo {
  std::string name;
  std::string description;
  std::vector<std::pair<std::string, std::string>> config;  // key -> default
  std::string error;
};

FixtureInfo fixture_info(const std::string& name) {
  FixtureInfo info;
  info.name = name;
  info.description = gc::ModelRegistry::get().description(name);
  gc::ModelConfig config;
  try {
    (void)gc::ModelRegistry::get().find(name)->factory(config);
  } catch (const std::exception& e) {
    info.error = e.what();
  }
  for (const auto& [key, value] : config.defaults_asked()) info.config.emplace_back(key, gc::to_string(value));
  return info;
}

int cmd_list(const std::vector<std::string>& paths, bool json) {
  std::vector<std::string> where = paths;
  if (where.empty() && fs::is_directory("scenarios")) where = {"scenarios"};
  bool ok = true;
  std::vector<gc::Scenario> scenarios;
  if (!where.empty()) scenarios = load_scenarios(where, ok);
  std::vector<FixtureInfo> fixtures;
  for (const auto& name : gc::ModelRegistry::get().names()) fixtures.push_back(fixture_info(name));

  if (json) {
    nlohmann::ordered_json doc;
    doc["plugins"] = gc::loaded_plugins();
    doc["fixtures"] = nlohmann::ordered_json::array();
    for (const auto& f : fixtures) {
      nlohmann::ordered_json config = nlohmann::ordered_json::object();
      for (const auto& [key, value] : f.config) config[key] = value;
      doc["fixtures"].push_back({{"name", f.name}, {"description", f.description}, {"config", config},
                                 {"construct_error", f.error}});
    }
    doc["probes"] = nlohmann::ordered_json::array();
    for (const auto& name : gc::ProbeRegistry::get().names()) {
      const auto* entry = gc::ProbeRegistry::get().find(name);
      std::vector<std::string> passes;
      for (auto pass : entry->passes) passes.emplace_back(gc::to_string(pass));
      doc["probes"].push_back({{"name", name}, {"description", entry->description}, {"passes", passes}});
    }
    doc["mutations"] = nlohmann::ordered_json::array();
    for (const auto& m : gc::mutation::all()) {
      doc["mutations"].push_back({{"name", m.name}, {"owner", m.owner}, {"description", m.description}});
    }
    doc["scenarios"] = nlohmann::ordered_json::array();
    for (const auto& sc : scenarios) {
      doc["scenarios"].push_back({{"name", sc.name}, {"fixture", sc.fixture}, {"file", sc.file},
                                  {"description", sc.description}, {"mutations", sc.mutations}});
    }
    fmt::print("{}\n", doc.dump(2));
    return ok ? kExitPassed : kExitUsage;
  }

  for (const auto& plugin : gc::loaded_plugins()) fmt::print("plugin: {}\n", plugin);
  fmt::print("fixtures:\n");
  for (const auto& f : fixtures) {
    fmt::print("  {:<18} {}\n", f.name, f.description);
    std::vector<std::string> keys;
    for (const auto& [key, value] : f.config) keys.push_back(fmt::format("{}={}", key, value));
    if (!keys.empty()) fmt::print("  {:<18} config: {}\n", "", fmt::join(keys, ", "));
    if (!f.error.empty()) fmt::print("  {:<18} (its defaults do not construct: {})\n", "", f.error);
  }
  fmt::print("probes:\n");
  for (const auto& name : gc::ProbeRegistry::get().names()) {
    fmt::print("  {:<14} {}\n", name, gc::ProbeRegistry::get().find(name)->description);
  }
  fmt::print("mutations:\n");
  for (const auto& m : gc::mutation::all()) {
    fmt::print("  {:<28} [{}] {}\n", m.name, m.owner, m.description);
  }
  if (where.empty()) return kExitPassed;
  fmt::print("scenarios:\n");
  for (const auto& sc : scenarios) {
    fmt::print("  {:<28} {:<10} {}\n", sc.name, sc.fixture, sc.file);
    for (const auto& [m, probes] : sc.mutations) {
      fmt::print("      mutation {} -> {}\n", m, fmt::join(probes, ", "));
    }
  }
  return ok ? kExitPassed : kExitUsage;
}

// ---- inspect ------------------------------------------------------------------------------

double half_to_double(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(frac, -24);
  else if (exp == 31) v = frac ? NAN : INFINITY;
  else v = std::ldexp(1024 + frac, exp - 25);
  return sign ? -v : v;
}

double minifloat_to_double(std::uint8_t b, int exp_bits, int man_bits, int bias, bool e4m3fn) {
  const int sign = b >> 7;
  const int exp = (b >> man_bits) & ((1 << exp_bits) - 1);
  const int man = b & ((1 << man_bits) - 1);
  double v;
  if (e4m3fn && exp == 0xf && man == 0x7) return NAN;
  if (!e4m3fn && exp == (1 << exp_bits) - 1) return man ? NAN : (sign ? -INFINITY : INFINITY);
  if (exp == 0) v = std::ldexp(man, 1 - bias - man_bits);
  else v = std::ldexp((1 << man_bits) + man, exp - bias - man_bits);
  return sign ? -v : v;
}

std::string value_at(const std::byte* p, gc::safetensors::Dtype dtype, std::int64_t i) {
  using D = gc::safetensors::Dtype;
  auto load = [&](auto tag) {
    decltype(tag) v;
    std::memcpy(&v, p + i * sizeof v, sizeof v);
    return v;
  };
  switch (dtype) {
    case D::F64: return fmt::format("{:g}", load(double{}));
    case D::F32: return fmt::format("{:g}", load(float{}));
    case D::F16: return fmt::format("{:g}", half_to_double(load(std::uint16_t{})));
    case D::BF16: {
      std::uint32_t bits = static_cast<std::uint32_t>(load(std::uint16_t{})) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return fmt::format("{:g}", f);
    }
    case D::I64: return fmt::format("{}", load(std::int64_t{}));
    case D::I32: return fmt::format("{}", load(std::int32_t{}));
    case D::I16: return fmt::format("{}", load(std::int16_t{}));
    case D::I8: return fmt::format("{}", load(std::int8_t{}));
    case D::U64: return fmt::format("{}", load(std::uint64_t{}));
    case D::U32: return fmt::format("{}", load(std::uint32_t{}));
    case D::U16: return fmt::format("{}", load(std::uint16_t{}));
    case D::U8: return fmt::format("{}", load(std::uint8_t{}));
    case D::BOOL: return load(std::uint8_t{}) ? "true" : "false";
    case D::F8_E4M3: return fmt::format("{:g}", minifloat_to_double(load(std::uint8_t{}), 4, 3, 7, true));
    case D::F8_E5M2: return fmt::format("{:g}", minifloat_to_double(load(std::uint8_t{}), 5, 2, 15, false));
    case D::E8M0: {
      std::uint8_t e = load(std::uint8_t{});
      return e == 0xff ? "nan" : fmt::format("{:g}", std::ldexp(1.0, e - 127));
    }
  }
  return "?";
}

int cmd_inspect(const std::vector<std::string>& files, int values) {
  int rc = kExitPassed;
  for (const auto& path : files) {
    try {
      const auto file = gc::safetensors::File::open(path);
      fmt::print("{}: {} tensors, {} bytes\n", path, file.tensors().size(), file.file_size());
      for (const auto& [k, v] : file.metadata()) fmt::print("  metadata {} = {}\n", k, v);
      fmt::print("  {:<40} {:<8} {:<16} {:>12}  {:<18} {}\n", "name", "dtype", "shape", "bytes",
                 "xxh3-64", "first values");
      for (const auto& t : file.tensors()) {
        const std::byte* data = file.data(t);
        const std::uint64_t hash = gc::fingerprint_bytes(data, t.nbytes());
        std::vector<std::string> first;
        for (std::int64_t i = 0; i < std::min<std::int64_t>(values, t.numel()); ++i) {
          first.push_back(value_at(data, t.dtype, i));
        }
        fmt::print("  {:<40} {:<8} {:<16} {:>12}  {:016x}  [{}{}]\n", t.name,
                   gc::safetensors::dtype_name(t.dtype), fmt::format("[{}]", fmt::join(t.shape, ", ")),
                   t.nbytes(), hash, fmt::join(first, ", "), t.numel() > values ? ", ..." : "");
      }
    } catch (const gc::safetensors::Error& e) {
      fmt::print(stderr, "graphcheck inspect: {}\n", e.what());
      rc = kExitUsage;
    }
  }
  return rc;
}

}  // namespace

int graphcheck::cli_main(int argc, char** argv) {
  // Standard streams closed by whoever started us would be reused by the next open(), and a
  // report or a child's pipe would end up on "stderr": keep 0-2 taken.
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0) return kExitHarness;
  }
  CLI::App app{
      "graphcheck: drives load -> PWAL -> graph capture -> replay -> refit -> replay cycles from "
      "scenario files and proves that captured graphs still read the live weights.\n"
      "Exit codes: 0 all passed, 1 a check failed, 2 bad usage/scenario/checkpoint, 3 harness "
      "failure."};
  app.require_subcommand(1);

  RunArgs run_args;
  CLI::App* run = app.add_subcommand(
      "run", "Run scenario files (default: scenarios/), each in a child process of its own. Reports "
             "are rewritten as scenarios finish (marked incomplete until the run ends). Exit 0 all "
             "passed, 1 a check failed, 2 bad usage/scenario/checkpoint, 3 a scenario crashed or "
             "timed out, 128+N stopped by signal N (SIGINT, SIGTERM)");
  run->add_option("paths", run_args.paths, "Scenario files or directories");
  run->add_option("--filter", run_args.filter, "Only scenarios whose name matches this glob");
  run->add_option("--mutation", run_args.mutations,
                  "Enable a mutation (repeatable): re-introduces a known bug; see `graphcheck list`");
  run->add_option("--seed", run_args.exec.seed, "Replace each scenario's seed");
  run->add_option("--report-dir", run_args.exec.report_dir,
                  "Where reports (JSON, JUnit, Markdown, HTML, Chrome trace), generated checkpoints "
                  "and each scenario's process output (work/<scenario>/run-N.log) go")
      ->capture_default_str();
  run_args.reports.add_options(run, "graphcheck", "junit.xml");
  run->add_flag("-v,--verbose", run_args.verbose, "Print every phase and batch size");
  run_args.exec.add_options(run);
  std::vector<std::string> plugins;
  const char* plugin_help =
      "Load models, mutations and probes from this shared library (repeatable; also "
      "GRAPHCHECK_PLUGIN_PATH, ':'-separated)";
  run->add_option("--plugin", plugins, plugin_help);

  MutantsArgs mutants_args;
  CLI::App* mutants = app.add_subcommand(
      "mutants", "Run each scenario clean and with every mutation it declares; print the kill "
                 "matrix (exit 1 when a declared probe misses its mutation or a clean run fails, 3 "
                 "when a run crashed)");
  mutants->add_option("paths", mutants_args.paths, "Scenario files or directories (default: scenarios/)");
  mutants->add_option("--filter", mutants_args.filter, "Only scenarios whose name matches this glob");
  mutants->add_option("--report-dir", mutants_args.exec.report_dir,
                      "Where the reports (mutants.json, mutants-junit.xml with one test case per "
                      "kill-matrix row, mutants.md, mutants.html, mutants-trace.json) and generated "
                      "checkpoints go")
      ->capture_default_str();
  mutants_args.reports.add_options(mutants, "mutants", "mutants-junit.xml");
  mutants_args.exec.add_options(mutants);
  mutants->add_option("--plugin", plugins, plugin_help);

  // The child process of an isolated run (not for people: no help entry).
  std::string child_file, child_record;
  int child_progress_fd = -1, child_threads = 1;
  gc::RunOptions child_options;
  std::vector<std::string> child_mutations;
  CLI::App* child = app.add_subcommand("__scenario", "");
  child->group("");
  child->add_option("file", child_file)->required();
  child->add_option("--record", child_record)->required();
  child->add_option("--progress-fd", child_progress_fd);
  child->add_option("--backend", child_options.backend);
  child->add_option("--work-dir", child_options.work_dir);
  child->add_option("--threads", child_threads);
  child->add_option("--seed", child_options.seed);
  child->add_option("--mutation", child_mutations);
  child->add_option("--plugin", plugins);

  std::string compare_base, compare_new, compare_markdown;
  gc::CompareOptions compare_options;
  CLI::App* compare = app.add_subcommand(
      "compare",
      "Compare two JSON reports of the same suite (e.g. last night's and tonight's): new and "
      "fixed failures, and per scenario and phase the model time (observe pass) and peak memory "
      "that grew beyond --max-regression. Prints a Markdown diff. Exit 0: no regression, 1: a new "
      "failure or a regression, 2: a report cannot be read");
  compare->add_option("base", compare_base, "The baseline JSON report")->required();
  compare->add_option("new", compare_new, "The JSON report to judge")->required();
  compare->add_option("--max-regression", compare_options.max_regression_pct,
                      "Percent growth of a time or memory figure that counts as a regression")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  compare->add_option("--min-seconds", compare_options.min_seconds,
                      "Ignore time changes smaller than this (timer noise on small scenarios)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  compare->add_option("--min-bytes", compare_options.min_bytes, "Ignore memory changes smaller than this")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e18));
  compare->add_option("--markdown", compare_markdown, "Also write the Markdown diff to this file");

  std::vector<std::string> list_paths;
  CLI::App* list = app.add_subcommand("list", "List fixtures, probes, mutations and scenarios");
  list->add_option("paths", list_paths, "Scenario files or directories (default: scenarios/)");
  list->add_option("--plugin", plugins, plugin_help);
  bool list_json = false;
  list->add_flag("--json", list_json, "Print everything as one JSON document (for tools)");

  std::vector<std::string> inspect_files;
  int inspect_values = 6;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "Show the tensors of safetensors files: dtype, shape, bytes, fingerprint, values");
  inspect->add_option("files", inspect_files, "safetensors files")->required();
  inspect->add_option("--values", inspect_values, "How many leading values to show per tensor")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }

  // Plugins first: scenario files name their models and mutations.
  if (*run || *mutants || *list || *child) {
    std::vector<std::string> files = gc::plugin_paths_from_env();
    files.insert(files.end(), plugins.begin(), plugins.end());
    try {
      for (const auto& file : files) (void)gc::load_plugin(file);
    } catch (const gc::PluginError& e) {
      fmt::print(stderr, "graphcheck: error: {}\n", e.what());
      return kExitUsage;
    }
  }

  try {
    if (*child) {
      child_options.mutations.insert(child_mutations.begin(), child_mutations.end());
      return gc::cli::run_child(child_file, child_options, child_threads, child_record, child_progress_fd);
    }
    if (*run) return cmd_run(run_args);
    if (*mutants) return cmd_mutants(mutants_args);
    if (*compare) return cmd_compare(compare_base, compare_new, compare_options, compare_markdown);
    if (*list) return cmd_list(list_paths, list_json);
    if (*inspect) return cmd_inspect(inspect_files, inspect_values);
  } catch (const std::exception& e) {
    fmt::print(stderr, "graphcheck: internal error: {}\n", e.what());
    return kExitHarness;
  }
  return kExitUsage;
}
