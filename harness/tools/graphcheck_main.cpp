// graphcheck CLI: run scenarios, list what this binary knows, inspect checkpoints.
// Exit codes: 0 all passed, 1 a check failed, 2 bad usage / scenario / checkpoint, 3 harness failure.

#include <fnmatch.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <set>

#include "graphcheck/backend.h"
#include "graphcheck/compare.h"
#include "graphcheck/driver.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"
#include "graphcheck/probe.h"
#include "graphcheck/reporter.h"
#include "graphcheck/safetensors.h"
#include "graphcheck/scenario.h"

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

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---- run ----------------------------------------------------------------------------------

struct RunArgs {
  std::vector<std::string> paths;
  std::string filter;
  std::string backend = "auto";
  std::vector<std::string> mutations;
  std::optional<std::uint64_t> seed;
  std::string report_dir = "reports/out";
  ReportPaths reports;
  bool verbose = false;
  int threads = 1;
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
  for (const auto& file : files) {
    try {
      scenarios.push_back(gc::parse_scenario_file(file, catalog));
    } catch (const gc::ScenarioError& e) {
      fmt::print(stderr, "graphcheck: {}\n", e.what());
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

int cmd_run(const RunArgs& args) {
  bool ok = true;
  std::vector<std::string> paths = args.paths.empty() ? std::vector<std::string>{"scenarios"} : args.paths;
  std::vector<gc::Scenario> scenarios = load_scenarios(paths, ok);
  if (!ok) return kExitUsage;
  for (const auto& name : args.mutations) {
    if (!gc::mutation::find(name)) {
      std::vector<std::string> names;
      for (const auto& m : gc::mutation::all()) names.push_back(m.name);
      fmt::print(stderr, "graphcheck: unknown mutation '{}': known mutations are {}\n", name,
                 fmt::join(names, ", "));
      return kExitUsage;
    }
  }
  if (!filter_scenarios(scenarios, args.filter)) return kExitUsage;

  if (!announce_backend(args.backend)) return kExitUsage;

  gc::ReporterMux reporters;
  reporters.add(std::make_unique<gc::ConsoleReporter>(std::cout, args.verbose));
  ReportPaths paths_out = args.reports;
  paths_out.add_reporters(reporters, args.report_dir, "graphcheck", "junit.xml");

  gc::RunRecord run;
  run.tool_version = GRAPHCHECK_VERSION;
  run.started_at = now_iso8601();
  run.threads = gc::set_intra_op_threads(args.threads);
  run.environment = gc::run_environment(args.backend);
  fmt::print("libtorch intra-op threads: {}\n", run.threads);
  const auto start = std::chrono::steady_clock::now();
  int runnable = 0;
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    const gc::Scenario& s = scenarios[i];
    reporters.on_scenario_start(s, static_cast<int>(i), static_cast<int>(scenarios.size()));
    gc::RunOptions options;
    options.backend = args.backend;
    options.seed = args.seed;
    options.work_dir = (fs::path(args.report_dir) / "work").string();
    std::string not_applicable;
    for (const auto& name : args.mutations) {
      const gc::mutation::Info* info = gc::mutation::find(name);
      if (!gc::mutation::applies_to(*info, s.fixture)) {
        not_applicable = fmt::format("mutation '{}' belongs to fixture '{}', not '{}'", name,
                                     info->owner, s.fixture);
      }
      options.mutations.insert(name);
    }
    gc::ScenarioRecord record;
    const double started = seconds_since(start);
    if (!not_applicable.empty()) {
      record.name = s.name;
      record.file = s.file;
      record.fixture = s.fixture;
      record.mutations = args.mutations;
      record.status = gc::Status::skipped;
      record.reason = "skipped: " + not_applicable;
    } else {
      ++runnable;
      record = gc::run_scenario(s, options, &reporters);
    }
    record.start = started;
    reporters.on_scenario_done(record);
    run.scenarios.push_back(std::move(record));
  }
  run.seconds = seconds_since(start);

  if (!write_reports(reporters, run)) return kExitHarness;
  fmt::print("reports: {}\n", paths_out.written());
  if (runnable == 0) {
    fmt::print(stderr, "graphcheck: no scenario could run with the mutations given\n");
    return kExitUsage;
  }
  return run.exit_code();
}

// ---- mutants ------------------------------------------------------------------------------

struct MutantsArgs {
  int threads = 1;
  std::vector<std::string> paths;
  std::string filter;
  std::string backend = "auto";
  std::string report_dir = "reports/out";
  ReportPaths reports;
};

// Runs every scenario clean and with each mutation it declares; the kill matrix is data in the
// run record (every report holds it) and is printed row by row as it is computed.
int cmd_mutants(const MutantsArgs& args) {
  bool ok = true;
  const bool whole_suite = args.paths.empty() && args.filter.empty();
  std::vector<std::string> paths = args.paths.empty() ? std::vector<std::string>{"scenarios"} : args.paths;
  std::vector<gc::Scenario> scenarios = load_scenarios(paths, ok);
  if (!ok) return kExitUsage;
  if (!filter_scenarios(scenarios, args.filter)) return kExitUsage;
  if (!announce_backend(args.backend)) return kExitUsage;

  gc::KillMatrix matrix;
  matrix.probes = gc::ProbeRegistry::get().names();
  matrix.probes.push_back("driver");
  gc::RunRecord run;
  run.tool_version = GRAPHCHECK_VERSION;
  run.started_at = now_iso8601();
  run.threads = gc::set_intra_op_threads(args.threads);
  run.environment = gc::run_environment(args.backend);
  const auto start = std::chrono::steady_clock::now();
  std::set<std::string> declared_anywhere;

  fmt::print("{}\n", gc::kill_matrix_header(matrix));
  fmt::print("(a cell names the pass whose finding killed the mutation; a probe is credited only "
             "with findings from its own passes, where no other check disturbs the run)\n");
  auto add_row = [&](gc::KillMatrixRow row) {
    if (!row.ok()) matrix.problems.push_back(fmt::format("{} {}: {}", row.scenario,
                                                         row.mutation.empty() ? "(clean)" : row.mutation,
                                                         row.verdict));
    fmt::print("{}\n", gc::kill_matrix_line(matrix, row));
    std::cout.flush();
    matrix.rows.push_back(std::move(row));
  };

  for (const auto& s : scenarios) {
    gc::RunOptions options;
    options.backend = args.backend;
    options.work_dir = (fs::path(args.report_dir) / "work").string();
    const double clean_started = seconds_since(start);
    gc::ScenarioRecord clean = gc::run_scenario(s, options);
    clean.start = clean_started;
    const std::set<std::string> clean_failed = clean.failed_probes();
    add_row(gc::kill_matrix_row(matrix, clean, "", {}));
    run.scenarios.push_back(std::move(clean));
    for (const auto& [mutation, declared] : s.mutations) {
      declared_anywhere.insert(mutation);
      if (!gc::mutation::applies_to(*gc::mutation::find(mutation), s.fixture)) {
        gc::KillMatrixRow row;
        row.scenario = s.name;
        row.mutation = mutation;
        row.verdict = fmt::format("FAIL: the mutation belongs to fixture '{}'", gc::mutation::find(mutation)->owner);
        add_row(std::move(row));
        continue;
      }
      options.mutations = {mutation};
      const double started = seconds_since(start);
      gc::ScenarioRecord r = gc::run_scenario(s, options);
      r.start = started;
      // The verdict again, now net of what the clean run already failed.
      r.verdicts = {gc::judge_mutation(r, mutation, clean_failed)};
      add_row(gc::kill_matrix_row(matrix, r, mutation, clean_failed));
      run.scenarios.push_back(std::move(r));
    }
  }
  if (whole_suite) {
    for (const auto& m : gc::mutation::all()) {
      if (declared_anywhere.count(m.name)) continue;
      const std::string problem =
          fmt::format("mutation {} is declared by no scenario: no probe is shown to catch it", m.name);
      fmt::print("{}\n", problem);
      matrix.problems.push_back(problem);
    }
  }
  run.seconds = seconds_since(start);
  const std::size_t problems = matrix.problems.size();
  run.kill_matrix = std::move(matrix);
  gc::ReporterMux reporters;
  ReportPaths paths_out = args.reports;
  paths_out.add_reporters(reporters, args.report_dir, "mutants", "mutants-junit.xml");
  if (!write_reports(reporters, run)) return kExitHarness;
  fmt::print("\n{} runs, {} problems ({:.1f} s); reports: {}\n", run.scenarios.size(), problems, run.seconds,
             paths_out.written());
  return problems == 0 ? kExitPassed : 1;
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

int cmd_list(const std::vector<std::string>& paths) {
  fmt::print("fixtures:\n");
  for (const auto& name : gc::ModelRegistry::get().names()) fmt::print("  {}\n", name);
  fmt::print("probes:\n");
  for (const auto& name : gc::ProbeRegistry::get().names()) {
    fmt::print("  {:<14} {}\n", name, gc::ProbeRegistry::get().find(name)->description);
  }
  fmt::print("mutations:\n");
  for (const auto& m : gc::mutation::all()) {
    fmt::print("  {:<28} [{}] {}\n", m.name, m.owner, m.description);
  }
  std::vector<std::string> where = paths;
  if (where.empty() && fs::is_directory("scenarios")) where = {"scenarios"};
  if (where.empty()) return kExitPassed;
  bool ok = true;
  auto scenarios = load_scenarios(where, ok);
  fmt::print("scenarios:\n");
  for (const auto& s : scenarios) {
    fmt::print("  {:<28} {:<10} {}\n", s.name, s.fixture, s.file);
    for (const auto& [m, probes] : s.mutations) {
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
        const std::uint64_t hash = XXH3_64bits(data, t.nbytes());
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

int main(int argc, char** argv) {
  CLI::App app{
      "graphcheck: drives load -> PWAL -> graph capture -> replay -> refit -> replay cycles from "
      "scenario files and proves that captured graphs still read the live weights.\n"
      "Exit codes: 0 all passed, 1 a check failed, 2 bad usage/scenario/checkpoint, 3 harness "
      "failure."};
  app.require_subcommand(1);

  RunArgs run_args;
  CLI::App* run = app.add_subcommand("run", "Run scenario files (default: scenarios/)");
  run->add_option("paths", run_args.paths, "Scenario files or directories");
  run->add_option("--filter", run_args.filter, "Only scenarios whose name matches this glob");
  run->add_option("--backend", run_args.backend, "Graph backend: auto, emulated or cuda")
      ->check(CLI::IsMember({"auto", "emulated", "cuda"}));
  run->add_option("--mutation", run_args.mutations,
                  "Enable a mutation (repeatable): re-introduces a known bug; see `graphcheck list`");
  run->add_option("--seed", run_args.seed, "Replace each scenario's seed");
  run->add_option("--report-dir", run_args.report_dir,
                  "Where reports (JSON, JUnit, Markdown, HTML, Chrome trace) and generated checkpoints go")
      ->capture_default_str();
  run_args.reports.add_options(run, "graphcheck", "junit.xml");
  run->add_flag("-v,--verbose", run_args.verbose, "Print every phase and batch size");
  run->add_option("--threads", run_args.threads,
                  "libtorch intra-op threads (0: libtorch's default, one per core). The default 1 "
                  "suits a shared CI machine: the scenarios are small, and threads that outnumber "
                  "free cores make them several times slower")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));

  MutantsArgs mutants_args;
  CLI::App* mutants = app.add_subcommand(
      "mutants", "Run each scenario clean and with every mutation it declares; print the kill "
                 "matrix (exit 1 when a declared probe misses its mutation or a clean run fails)");
  mutants->add_option("paths", mutants_args.paths, "Scenario files or directories (default: scenarios/)");
  mutants->add_option("--backend", mutants_args.backend, "Graph backend: auto, emulated or cuda")
      ->check(CLI::IsMember({"auto", "emulated", "cuda"}));
  mutants->add_option("--filter", mutants_args.filter, "Only scenarios whose name matches this glob");
  mutants->add_option("--report-dir", mutants_args.report_dir,
                      "Where the reports (mutants.json, mutants-junit.xml with one test case per "
                      "kill-matrix row, mutants.md, mutants.html, mutants-trace.json) and generated "
                      "checkpoints go")
      ->capture_default_str();
  mutants_args.reports.add_options(mutants, "mutants", "mutants-junit.xml");
  mutants->add_option("--threads", mutants_args.threads,
                      "libtorch intra-op threads (0: libtorch's default); see run --threads")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));

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

  try {
    if (*run) return cmd_run(run_args);
    if (*mutants) return cmd_mutants(mutants_args);
    if (*compare) return cmd_compare(compare_base, compare_new, compare_options, compare_markdown);
    if (*list) return cmd_list(list_paths);
    if (*inspect) return cmd_inspect(inspect_files, inspect_values);
  } catch (const std::exception& e) {
    fmt::print(stderr, "graphcheck: internal error: {}\n", e.what());
    return kExitHarness;
  }
  return kExitUsage;
}
