// graphcheck CLI: parses flags and calls the session (graphcheck/engine/session.h) for run,
// mutants and list; compare and inspect read files. Torch-free.
// Exit codes: 0 all passed, 1 a check failed, 2 bad usage / scenario / checkpoint, 3 harness failure.

#include <fcntl.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include "graphcheck/cli.h"
#include "graphcheck/engine/compare.h"
#include "graphcheck/engine/session.h"
#include "graphcheck/plugin.h"
#include "graphcheck/engine/reporter.h"
#include "graphcheck/safetensors.h"

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

// A selection's errors and notes, in the order they arose.
void say(const gc::session::Selection& selection) {
  for (std::size_t i = 0; i < selection.errors.size(); ++i) {
    if (i == selection.errors_before_notes) {
      for (const auto& note : selection.notes) fmt::print(stderr, "graphcheck: note: {}\n", note);
    }
    fmt::print(stderr, "graphcheck: {}\n", selection.errors[i]);
  }
  if (selection.errors_before_notes >= selection.errors.size()) {
    for (const auto& note : selection.notes) fmt::print(stderr, "graphcheck: note: {}\n", note);
  }
}

// ---- reports ------------------------------------------------------------------------------

// Where a run's reports go: one flag per registered reporter (a path, or '-' for none; default
// REPORT_DIR/<its default name>), and --report NAME=PATH for any reporter, a plugin's included.
struct ReportPaths {
  std::map<std::string, std::string> paths;  // reporter -> path given
  std::vector<std::string> named;            // --report NAME=PATH
  std::vector<std::string> written_paths;

  // After the command's other flags: a reporter named like one of them (or "report") keeps
  // --report NAME=PATH only.
  void add_options(CLI::App* app, const std::string& stem) {
    app->add_option("--report", named,
                    "Write the report of the reporter NAME to PATH (repeatable): NAME=PATH, for any "
                    "registered reporter, those of plugins included");
    for (const auto& name : gc::ReporterRegistry::get().names()) {
      const auto* entry = gc::ReporterRegistry::get().find(name);
      if (app->get_option_no_throw("--" + name) != nullptr) continue;
      const std::string deflt = entry->default_file ? fmt::format("default REPORT_DIR/{}", entry->default_file(stem))
                                                    : std::string("default: none");
      app->add_option("--" + name, paths[name], fmt::format("{} ({}; '-': none)", entry->help, deflt));
    }
  }

  // The paths given, by reporter: --NAME PATH, then --report NAME=PATH. A malformed --report is
  // left out, and the first one is put in `malformed`.
  [[nodiscard]] std::map<std::string, std::string> given(std::string* malformed = nullptr) const {
    std::map<std::string, std::string> out;
    for (const auto& [name, path] : paths) {
      if (!path.empty()) out[name] = path;
    }
    for (const auto& spec : named) {
      const auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
        if (malformed && malformed->empty()) *malformed = spec;
        continue;
      }
      out[spec.substr(0, eq)] = spec.substr(eq + 1);
    }
    return out;
  }

  // Before anything else can fail: the reports an earlier run left where this one writes its own
  // go (a malformed --report is said later, by add_reporters()).
  void remove_previous(const std::string& report_dir, const std::string& stem) const {
    (void)gc::session::remove_previous_reports(given(), report_dir, stem);
  }

  // Adds a reporter for each path kept; false (after saying why) on an unknown reporter or a
  // malformed --report.
  bool add_reporters(gc::ReporterMux& mux, const std::string& report_dir, const std::string& stem) {
    std::string malformed;
    const std::map<std::string, std::string> paths_given = given(&malformed);
    if (!malformed.empty()) {
      fmt::print(stderr, "graphcheck: --report '{}' is not NAME=PATH (e.g. --report json=out/run.json)\n", malformed);
      return false;
    }
    std::string error;
    const auto written = gc::session::open_reporters(paths_given, report_dir, stem, mux, error);
    if (!written) fmt::print(stderr, "graphcheck: --report: {}\n", error);
    if (written) written_paths = *written;
    return written.has_value();
  }

  [[nodiscard]] std::string written() const { return fmt::format("{}", fmt::join(written_paths, " ")); }
};

// ---- run and mutants ----------------------------------------------------------------------

// The flags of how scenarios execute, shared by run and mutants.
struct ExecArgs {
  gc::session::ExecOptions options;
  bool no_isolate = false;
  bool slow = false;
  std::optional<int> shard_index, total_shards;

  void add_options(CLI::App* app) {
    app->add_option("--backend", options.backend, "Graph backend: auto, emulated or cuda")
        ->check(CLI::IsMember({"auto", "emulated", "cuda"}));
    app->add_option("--threads", options.threads,
                    "libtorch intra-op threads (0: libtorch's default, one per core). The default 1 "
                    "suits a shared CI machine: the scenarios are small, and threads that outnumber "
                    "free cores make them several times slower")
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
    app->add_flag("--slow", slow,
                  "Also run the slow scenarios (slow: true: scale runs of minutes and GiB) found in the "
                  "directories given; the nightly job does, the pre-merge job and the suite do not");
    app->add_flag("--no-isolate", no_isolate,
                  "Run the scenarios in this process instead of one child process each (for a "
                  "debugger; a crash then ends the run, and --timeout and -j do not apply)");
    app->add_option("-j,--jobs", options.jobs, "Scenarios run at once, each in its own process")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    app->add_option("--timeout", options.timeout,
                    fmt::format("Seconds a scenario may run before its process is killed and it is "
                                "reported as crashed (0: no limit). Default: the scenario's timeout "
                                "key, else {:g}",
                                gc::session::kDefaultTimeout))
        ->check(CLI::Range(0.0, 1e7));
    app->add_option("--repeat", options.repeat,
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

  [[nodiscard]] gc::session::ExecOptions resolved() const {
    gc::session::ExecOptions o = options;
    o.isolate = !no_isolate;
    return o;
  }
};

struct RunArgs {
  std::vector<std::string> paths;
  std::string filter;
  std::vector<std::string> mutations;
  bool verbose = false;
  ExecArgs exec;
  ReportPaths reports;
};

// Scenarios to run: loaded, filtered, sharded, and the backend announced; nullopt (after saying
// why) when there is nothing to run or the backend is unavailable.
std::optional<gc::session::Selection> select(const std::vector<std::string>& paths, const std::string& filter,
                                             const ExecArgs& exec) {
  gc::session::Selection selection =
      gc::session::select_scenarios(paths, filter, exec.shard_index, exec.total_shards, exec.slow);
  say(selection);
  if (!selection.errors.empty()) return std::nullopt;
  if (selection.shard.total > 1) {
    fmt::print("shard {} of {}: {} of {} scenarios\n", selection.shard.index, selection.shard.total,
               selection.scenarios.size(), selection.before_shard);
  }
  return selection;
}

// Which backend runs, and why, before anything else: an unavailable one is a usage error.
bool announce_backend(const std::string& name) {
  std::string error;
  const std::optional<std::string> backend = gc::session::describe_backend(name, error);
  if (!backend) {
    fmt::print(stderr, "graphcheck: {}\n", error);
    return false;
  }
  fmt::print("graphcheck {}: backend {}\n", GRAPHCHECK_VERSION, *backend);
  return true;
}

// Says why a run ended as it did, and returns its exit code.
int finish(const gc::session::Plan& plan, const gc::session::Outcome& outcome, gc::session::Shard shard) {
  const gc::session::Ending end = gc::session::ending(plan, outcome, shard);
  if (end.error) fmt::print(stderr, "graphcheck: {}\n", end.message);
  else if (!end.message.empty()) fmt::print("{}\n", end.message);
  return end.code;
}

int cmd_run(RunArgs& args) {
  args.reports.remove_previous(args.exec.resolved().report_dir, "graphcheck");
  const std::optional<gc::session::Selection> selection = select(args.paths, args.filter, args.exec);
  if (!selection) return kExitUsage;
  std::string error;
  const std::optional<gc::session::Plan> plan = gc::session::plan_run(selection->scenarios, args.mutations, error);
  if (!plan) {
    fmt::print(stderr, "graphcheck: {}\n", error);
    return kExitUsage;
  }
  const gc::session::ExecOptions exec = args.exec.resolved();
  if (!announce_backend(exec.backend)) return kExitUsage;

  gc::ConsoleReporter console(std::cout, args.verbose);
  gc::ReporterMux files;
  if (!args.reports.add_reporters(files, exec.report_dir, "graphcheck")) return kExitUsage;
  const std::string timeout = !exec.timeout         ? fmt::format("{:g} s unless a scenario sets one", gc::session::kDefaultTimeout)
                              : *exec.timeout > 0 ? fmt::format("{:g} s", *exec.timeout)
                                                  : std::string("none");
  fmt::print("libtorch intra-op threads: {}; {}\n", gc::set_intra_op_threads(exec.threads),
             exec.isolate ? fmt::format("each scenario in its own process, {} at once, timeout {}", exec.jobs, timeout)
                          : std::string("in this process (--no-isolate)"));
  gc::session::Listeners listeners;
  listeners.console = &console;
  listeners.report_error = [](const std::string& error) { fmt::print(stderr, "graphcheck: {}\n", error); };
  const gc::session::Outcome outcome = gc::session::run_plan(*plan, exec, selection->shard, files, listeners);
  console.on_run_done(outcome.run);
  if (outcome.report_errors.empty()) fmt::print("reports: {}\n", args.reports.written());
  return finish(*plan, outcome, selection->shard);
}

struct MutantsArgs {
  std::vector<std::string> paths;
  std::string filter;
  ExecArgs exec;
  ReportPaths reports;
};

// Runs every scenario clean and with each mutation it declares; the kill matrix is data in the
// run record (every report holds it) and is printed row by row as it is judged.
int cmd_mutants(MutantsArgs& args) {
  const bool whole_suite = args.paths.empty() && args.filter.empty();
  args.reports.remove_previous(args.exec.resolved().report_dir, "mutants");
  const std::optional<gc::session::Selection> selection = select(args.paths, args.filter, args.exec);
  if (!selection) return kExitUsage;
  const gc::session::ExecOptions exec = args.exec.resolved();
  if (!announce_backend(exec.backend)) return kExitUsage;
  const gc::session::Plan plan = gc::session::plan_mutants(selection->scenarios);

  gc::ReporterMux files;
  if (!args.reports.add_reporters(files, exec.report_dir, "mutants")) return kExitUsage;
  gc::KillMatrix columns;  // the header: every probe, then "driver"
  columns.probes = gc::session::KillMatrixBuilder(plan).matrix().probes;
  fmt::print("{}\n", gc::kill_matrix_header(columns));
  fmt::print("(a cell names the pass whose finding killed the mutation; a probe is credited only "
             "with findings from its own passes, where no other check disturbs the run)\n");
  gc::session::Listeners listeners;
  listeners.row = [](const gc::KillMatrix& matrix, const gc::KillMatrixRow& row) {
    fmt::print("{}\n", gc::kill_matrix_line(matrix, row));
    std::cout.flush();
  };
  listeners.problem = [](const std::string& problem) { fmt::print("{}\n", problem); };
  listeners.report_error = [](const std::string& error) { fmt::print(stderr, "graphcheck: {}\n", error); };
  const gc::session::Outcome outcome = gc::session::run_plan(plan, exec, selection->shard, files, listeners, whole_suite);
  const gc::RunRecord& run = outcome.run;
  const std::size_t problems = run.kill_matrix ? run.kill_matrix->problems.size() : 0;
  if (outcome.report_errors.empty()) {
    fmt::print("\n{} runs, {} problems ({:.1f} s); reports: {}\n", run.scenarios.size(), problems, run.seconds,
               args.reports.written());
  }
  return finish(plan, outcome, selection->shard);
}

// ---- compare, list, inspect ---------------------------------------------------------------

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

// The reports of a sharded run's shards as the reports of the whole run: every format, written
// from the merged record. Exit: the merged run's code (0 all passed, 1 a check failed, ...); 3
// when a shard is missing or incomplete (said on stderr and in every report); 2 when a report
// cannot be read.
int cmd_merge(const std::vector<std::string>& files, const std::string& report_dir, ReportPaths& reports) {
  std::vector<std::pair<std::string, gc::RunRecord>> shards;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      fmt::print(stderr, "graphcheck merge: cannot read '{}': {}\n", file, std::strerror(errno));
      return kExitUsage;
    }
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
      shards.emplace_back(file, gc::run_record_from_json(text));
    } catch (const std::exception& e) {
      fmt::print(stderr, "graphcheck merge: {}: {}: give the graphcheck.json (or mutants.json) of each shard\n", file,
                 e.what());
      return kExitUsage;
    }
  }
  gc::session::MergedRun merged = gc::session::merge_shards(std::move(shards));
  const std::string stem = merged.run.kill_matrix ? "mutants" : "graphcheck";
  gc::ReporterMux mux;
  if (!reports.add_reporters(mux, report_dir, stem)) return kExitUsage;
  try {
    mux.on_run_done(merged.run);
  } catch (const std::exception& e) {
    fmt::print(stderr, "graphcheck merge: {}\n", e.what());
    return kExitHarness;
  }
  const gc::RunRecord& run = merged.run;
  fmt::print("{} scenarios from {} report{}: {} passed, {} failed, {} errors, {} crashed, {} skipped{}\n",
             run.scenarios.size(), files.size(), files.size() == 1 ? "" : "s", run.count(gc::Status::passed),
             run.count(gc::Status::failed), run.count(gc::Status::error), run.count(gc::Status::crashed),
             run.count(gc::Status::skipped),
             run.kill_matrix ? fmt::format("; kill matrix: {} rows, {} problems", run.kill_matrix->rows.size(),
                                           run.kill_matrix->problems.size())
                             : std::string());
  fmt::print("reports: {}\n", reports.written());
  for (const auto& p : merged.problems) fmt::print(stderr, "graphcheck merge: {}\n", p);
  if (!merged.problems.empty()) return kExitHarness;
  if (run.kill_matrix) return run.kill_matrix->problems.empty() ? kExitPassed : 1;
  return run.exit_code();
}

int cmd_list(const std::vector<std::string>& paths, bool json) {
  std::vector<std::string> where = paths;
  if (where.empty() && fs::is_directory("scenarios")) where = {"scenarios"};
  gc::session::Selection selection;
  if (!where.empty()) selection = gc::session::select_scenarios(where);
  say(selection);
  const gc::session::Inventory inventory = gc::session::inventory();
  const std::vector<gc::Scenario>* scenarios = where.empty() ? nullptr : &selection.scenarios;
  fmt::print("{}", json ? gc::session::inventory_json(inventory, selection.scenarios)
                        : gc::session::inventory_text(inventory, scenarios));
  return selection.errors.empty() ? kExitPassed : kExitUsage;
}

int cmd_inspect(const std::vector<std::string>& files, int values) {
  int rc = kExitPassed;
  for (const auto& path : files) {
    try {
      fmt::print("{}", gc::safetensors::inspect(path, values));
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
  run->add_option("--seed", run_args.exec.options.seed, "Replace each scenario's seed");
  run->add_option("--report-dir", run_args.exec.options.report_dir,
                  "Where reports (JSON, JUnit, Markdown, HTML, Chrome trace), generated checkpoints "
                  "and each scenario's process output (work/<scenario>/run-N.log) go")
      ->capture_default_str();
  run->add_flag("-v,--verbose", run_args.verbose, "Print every phase and batch size");
  run_args.exec.add_options(run);
  std::vector<std::string> plugins;
  const char* plugin_help =
      "Load models, mutations and probes from this shared library (repeatable; also "
      "GRAPHCHECK_PLUGIN_PATH, ':'-separated)";
  run->add_option("--plugin", plugins, plugin_help);
  run_args.reports.add_options(run, "graphcheck");

  MutantsArgs mutants_args;
  CLI::App* mutants = app.add_subcommand(
      "mutants", "Run each scenario clean and with every mutation it declares; print the kill "
                 "matrix (exit 1 when a declared probe misses its mutation or a clean run fails, 3 "
                 "when a run crashed)");
  mutants->add_option("paths", mutants_args.paths, "Scenario files or directories (default: scenarios/)");
  mutants->add_option("--filter", mutants_args.filter, "Only scenarios whose name matches this glob");
  mutants->add_option("--report-dir", mutants_args.exec.options.report_dir,
                      "Where the reports (mutants.json, mutants-junit.xml with one test case per "
                      "kill-matrix row, mutants.md, mutants.html, mutants-trace.json) and generated "
                      "checkpoints go")
      ->capture_default_str();
  mutants_args.exec.add_options(mutants);
  mutants->add_option("--plugin", plugins, plugin_help);
  mutants_args.reports.add_options(mutants, "mutants");

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
  child->add_option("--timeout", child_options.timeout);
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

  std::vector<std::string> merge_files;
  std::string merge_dir = "reports/out";
  ReportPaths merge_reports;
  CLI::App* merge = app.add_subcommand(
      "merge",
      "Merge the JSON reports of a sharded run (--shard-index I --total-shards N, e.g. parallel CI jobs) "
      "into the report of the whole run, and write every report format from it (graphcheck.* or "
      "mutants.*). A missing, doubled or incomplete shard is named, and the merged report says it is "
      "incomplete. `graphcheck compare` reads the result. Exit: as `run` (mutants: 1 on a kill-matrix "
      "problem); 3 when a shard is missing or incomplete; 2 when a report cannot be read");
  merge->add_option("reports", merge_files, "The shards' graphcheck.json (or mutants.json) files")->required();
  merge->add_option("--report-dir", merge_dir, "Where the merged reports go")->capture_default_str();
  merge_reports.add_options(merge, "graphcheck");

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
      return gc::session::run_child(child_file, child_options, child_threads, child_record, child_progress_fd);
    }
    if (*run) return cmd_run(run_args);
    if (*mutants) return cmd_mutants(mutants_args);
    if (*compare) return cmd_compare(compare_base, compare_new, compare_options, compare_markdown);
    if (*merge) return cmd_merge(merge_files, merge_dir, merge_reports);
    if (*list) return cmd_list(list_paths, list_json);
    if (*inspect) return cmd_inspect(inspect_files, inspect_values);
  } catch (const std::exception& e) {
    fmt::print(stderr, "graphcheck: internal error: {}\n", e.what());
    return kExitHarness;
  }
  return kExitUsage;
}
