// The session's planning and execution: which scenarios, which runs, and running them.
// Torch-free.

#include <fnmatch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "graphcheck/engine/session.h"
#include "graphcheck/mutation.h"
#include "session/runner.h"

namespace graphcheck::session {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Parses the scenario files under `paths`; a file of another front found in a directory is a
// note, one named on the command line an error (this process cannot run it).
void load(const std::vector<std::string>& paths, Selection& out, bool include_slow) {
  std::vector<std::string> files;
  try {
    files = collect_scenario_files(paths);
  } catch (const ScenarioError& e) {
    out.errors.emplace_back(e.what());
    return;
  }
  if (files.empty()) {
    out.errors.push_back(fmt::format("no scenario files (*.yaml) under {}", fmt::join(paths, ", ")));
    return;
  }
  const ScenarioCatalog catalog = default_catalog();
  std::set<std::string> named;  // files named on the command line, as against found in a directory
  for (const auto& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) named.insert(fs::path(p).lexically_normal().string());
  }
  std::vector<std::string> other_front, slow;
  for (const auto& file : files) {
    try {
      Scenario s = parse_scenario_file(file, catalog);
      // A slow scenario (`slow: true`) found in a directory runs only with --slow; named, it runs.
      if (s.slow && !include_slow && !named.count(fs::path(file).lexically_normal().string())) {
        slow.push_back(file);
        continue;
      }
      out.scenarios.push_back(std::move(s));
    } catch (const ScenarioNeedsFront& e) {
      if (named.count(fs::path(file).lexically_normal().string())) {
        out.errors.emplace_back(e.what());
      } else {
        other_front.push_back(file);
      }
    } catch (const ScenarioError& e) {
      out.errors.emplace_back(e.what());
    }
  }
  if (!slow.empty()) {
    out.errors_before_notes = out.errors.size();
    out.notes.push_back(fmt::format("{} slow scenario{} left out (slow: true): --slow runs {}, as the nightly job does ({})",
                                    slow.size(), slow.size() == 1 ? "" : "s", slow.size() == 1 ? "it" : "them",
                                    fmt::join(slow, ", ")));
    if (out.scenarios.empty() && out.errors.empty() && other_front.empty()) {
      out.errors.push_back(fmt::format("every scenario under {} is slow: give --slow to run them", fmt::join(paths, ", ")));
    }
  }
  if (other_front.empty()) return;
  out.errors_before_notes = out.errors.size();
  out.notes.push_back(fmt::format(
      "{} scenario file{} name{} Python models, which this program does not run: `python -m graphcheck run` "
      "runs them ({})",
      other_front.size(), other_front.size() == 1 ? "" : "s", other_front.size() == 1 ? "s" : "",
      fmt::join(other_front, ", ")));
  if (out.scenarios.empty() && out.errors.empty()) {
    out.errors.push_back(fmt::format("no C++ scenario left to run under {}", fmt::join(paths, ", ")));
  }
}

}  // namespace

std::optional<Shard> resolve_shard(std::optional<int> index, std::optional<int> total, std::string& error) {
  auto env = [](const char* name) -> std::optional<int> {
    const char* v = std::getenv(name);
    if (!v || !*v) return std::nullopt;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end != '\0' || x < 0 || x > 1'000'000) return -1;
    return static_cast<int>(x);
  };
  const std::optional<int> i = index ? index : env("GTEST_SHARD_INDEX");
  const std::optional<int> n = total ? total : env("GTEST_TOTAL_SHARDS");
  if (!i && !n) return Shard{};
  if (!i || !n || *i < 0 || *n < 1 || *i >= *n) {
    error = fmt::format(
        "shard index {} of {} total shards is not a shard: give both --shard-index I and --total-shards N "
        "(or GTEST_SHARD_INDEX and GTEST_TOTAL_SHARDS) with 0 <= I < N",
        i ? std::to_string(*i) : "(none)", n ? std::to_string(*n) : "(none)");
    return std::nullopt;
  }
  // The gtest sharding protocol: say that this program knows it.
  if (const char* status = std::getenv("GTEST_SHARD_STATUS_FILE"); status && *status) {
    std::FILE* f = std::fopen(status, "a");
    if (f) std::fclose(f);
  }
  return Shard{*i, *n};
}

namespace {

// Loaded and filtered; false when there is an error.
bool load_and_filter(const std::vector<std::string>& given, const std::string& filter, Selection& out,
                     bool include_slow) {
  load(given.empty() ? std::vector<std::string>{"scenarios"} : given, out, include_slow);
  if (!out.errors.empty()) return false;
  if (!filter.empty()) {
    std::vector<Scenario> kept;
    for (auto& s : out.scenarios) {
      if (fnmatch(filter.c_str(), s.name.c_str(), 0) == 0) kept.push_back(std::move(s));
    }
    if (kept.empty()) {
      out.errors.push_back(fmt::format("--filter '{}' matches no scenario", filter));
      return false;
    }
    out.scenarios = std::move(kept);
  }
  out.before_shard = out.scenarios.size();
  return true;
}

void keep_shard(Selection& out, Shard shard) {
  out.shard = shard;
  if (shard.total <= 1) return;
  std::vector<Scenario> kept;
  for (std::size_t i = 0; i < out.scenarios.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(shard.total)) == shard.index) {
      kept.push_back(std::move(out.scenarios[i]));
    }
  }
  out.scenarios = std::move(kept);
}

}  // namespace

Selection select_scenarios(const std::vector<std::string>& given, const std::string& filter,
                           std::optional<int> shard_index, std::optional<int> total_shards, bool include_slow) {
  Selection out;
  if (!load_and_filter(given, filter, out, include_slow)) return out;
  std::string error;
  const std::optional<Shard> shard = resolve_shard(shard_index, total_shards, error);
  if (!shard) {
    out.errors.push_back(std::move(error));
    return out;
  }
  keep_shard(out, *shard);
  return out;
}

Selection select_scenarios(const std::vector<std::string>& given, const std::string& filter,
                           std::optional<Shard> shard, bool include_slow) {
  if (!shard) return select_scenarios(given, filter, std::nullopt, std::nullopt, include_slow);
  Selection out;
  if (load_and_filter(given, filter, out, include_slow)) keep_shard(out, *shard);
  return out;
}

std::size_t Plan::runnable() const {
  std::size_t n = 0;
  for (const auto& item : items) n += item.skip.empty();
  return n;
}

std::optional<Plan> plan_run(const std::vector<Scenario>& scenarios, const std::vector<std::string>& mutations,
                             std::string& error) {
  for (const auto& name : mutations) {
    if (mutation::find(name)) continue;
    std::vector<std::string> names;
    for (const auto& m : mutation::all()) names.push_back(m.name);
    error = fmt::format("unknown mutation '{}': known mutations are {}", name, fmt::join(names, ", "));
    return std::nullopt;
  }
  Plan plan;
  for (const auto& s : scenarios) {
    PlanItem item;
    item.scenario = &s;
    for (const auto& name : mutations) {
      const mutation::Info* info = mutation::find(name);
      if (!mutation::applies_to(*info, s.fixture)) {
        item.skip = fmt::format("mutation '{}' belongs to fixture '{}', not '{}'", name, info->owner, s.fixture);
      }
      item.mutations.insert(name);
    }
    item.clean = plan.items.size();
    plan.items.push_back(std::move(item));
  }
  return plan;
}

Plan plan_mutants(const std::vector<Scenario>& scenarios) {
  Plan plan;
  plan.mutants = true;
  for (const auto& s : scenarios) {
    const std::size_t clean = plan.items.size();
    PlanItem clean_run;
    clean_run.scenario = &s;
    clean_run.clean = clean;
    plan.items.push_back(std::move(clean_run));
    for (const auto& [mutation, declared] : s.mutations) {
      plan.declared.insert(mutation);
      PlanItem item;
      item.scenario = &s;
      item.mutations = {mutation};
      item.mutation = mutation;
      item.clean = clean;
      const mutation::Info* info = mutation::find(mutation);
      if (!mutation::applies_to(*info, s.fixture)) {
        item.skip = fmt::format("the mutation belongs to fixture '{}'", info->owner);
      }
      plan.items.push_back(std::move(item));
    }
  }
  return plan;
}

std::vector<std::size_t> execute(const Plan& plan, const ExecOptions& options, ProgressListener* console,
                                 const std::function<void(std::size_t, ScenarioRecord)>& done) {
  const auto repeat = static_cast<std::size_t>(options.repeat);
  std::vector<Job> jobs;
  std::vector<std::size_t> job_item;  // job -> plan item
  for (std::size_t i = 0; i < plan.items.size(); ++i) {
    const PlanItem& item = plan.items[i];
    if (!item.skip.empty()) continue;
    for (std::size_t r = 0; r < repeat; ++r) {
      Job job;
      job.scenario = item.scenario;
      job.options.backend = options.backend;
      job.options.seed = options.seed;
      job.options.mutations = item.mutations;
      job.options.work_dir = (fs::path(options.report_dir) / "work").string();
      job.timeout = options.timeout            ? *options.timeout
                    : item.scenario->timeout > 0 ? item.scenario->timeout
                                                 : kDefaultTimeout;
      job.options.timeout = job.timeout;
      const fs::path dir = fs::path(job.options.work_dir) / item.scenario->name;
      const std::string tag = fmt::format("run-{}{}", i, repeat > 1 ? fmt::format("-{}", r + 1) : "");
      job.log_path = (dir / (tag + ".log")).string();
      job.record_path = (dir / (tag + ".record.json")).string();
      jobs.push_back(std::move(job));
      job_item.push_back(i);
    }
  }
  // Skipped rows are done at once.
  for (std::size_t i = 0; i < plan.items.size(); ++i) {
    const PlanItem& item = plan.items[i];
    if (item.skip.empty()) continue;
    ScenarioRecord r;
    r.name = item.scenario->name;
    r.file = item.scenario->file;
    r.fixture = item.scenario->fixture;
    r.mutations.assign(item.mutations.begin(), item.mutations.end());
    r.status = Status::skipped;
    r.reason = "skipped: " + item.skip;
    if (console) console->on_scenario_done(r);
    done(i, std::move(r));
  }
  std::map<std::size_t, std::vector<ScenarioRecord>> partial;  // item -> its repeats so far
  std::map<std::size_t, double> started_at;
  const auto t0 = std::chrono::steady_clock::now();
  int announced = 0;
  const int runnable = static_cast<int>(jobs.size() / repeat);
  RunnerEvents events;
  events.started = [&](std::size_t job) {
    const std::size_t item = job_item[job];
    if (started_at.count(item)) return;
    started_at[item] = seconds_since(t0);
    if (console) console->on_scenario_start(*plan.items[item].scenario, announced, runnable);
    ++announced;
  };
  events.step = [&](std::size_t job, const std::string& pass, const std::string& phase, int cycle,
                    std::int64_t batch) {
    if (console && pass == "observe" && (job % repeat) == 0) console->on_phase(phase, cycle, batch);
  };
  events.done = [&](std::size_t job, ScenarioRecord record) {
    const std::size_t item = job_item[job];
    auto& runs = partial[item];
    runs.push_back(std::move(record));
    if (runs.size() < repeat) return;
    ScenarioRecord merged = merge_repeats(std::move(runs));
    merged.causes = triage(merged, repro_command(merged, options));
    partial.erase(item);
    merged.start = started_at[item];
    if (console) console->on_scenario_done(merged);
    done(item, std::move(merged));
  };
  RunnerOptions runner;
  runner.isolate = options.isolate;
  runner.jobs = options.jobs;
  runner.threads = options.threads;
  std::set<std::size_t> stopped;
  for (std::size_t job : run_jobs(jobs, runner, events)) stopped.insert(job_item[job]);
  return {stopped.begin(), stopped.end()};
}

std::string stop_reason(int signal, std::size_t finished, std::size_t total, const std::vector<std::string>& not_run) {
  return fmt::format("stopped by {} after {} of {} runs finished; not run or stopped while running: {}",
                     signal_name(signal), finished, total, fmt::join(not_run, ", "));
}

std::string item_name(const PlanItem& item, bool mutants) {
  if (!mutants) return item.scenario->name;
  return item.mutation.empty() ? item.scenario->name + " (clean)" : item.scenario->name + " " + item.mutation;
}

}  // namespace graphcheck::session
