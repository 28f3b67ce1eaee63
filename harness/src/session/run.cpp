// The session's run loop: executes a plan, judges it, and streams the run record to the
// reporters. Torch-free.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "graphcheck/engine/session.h"

namespace graphcheck::session {

namespace {

double seconds_between(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// Whether the reports are due for an intermediate rewrite. Each rewrite renders the whole run
// so far, so rewriting after every scenario costs time quadratic in the number of scenarios;
// this keeps rewrites at least a second apart and at most about a tenth of the run's time. The
// first finished scenario is always written, and the final reports always are.
class RewriteThrottle {
 public:
  [[nodiscard]] bool due() const {
    return !m_last || seconds_between(*m_last, std::chrono::steady_clock::now()) >= std::max(1.0, 10 * m_cost);
  }
  template <class Write>
  void write(Write&& write) {
    const auto t0 = std::chrono::steady_clock::now();
    write();
    m_last = std::chrono::steady_clock::now();
    m_cost = seconds_between(t0, *m_last);
  }

 private:
  std::optional<std::chrono::steady_clock::time_point> m_last;
  double m_cost = 0;  // seconds the last rewrite took
};

}  // namespace

std::vector<std::pair<std::string, std::string>> report_files(const std::map<std::string, std::string>& given,
                                                             const std::string& report_dir, const std::string& stem) {
  const ReporterRegistry& registry = ReporterRegistry::get();
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& name : registry.names()) {
    const ReporterRegistry::Entry* entry = registry.find(name);
    const auto it = given.find(name);
    std::string path = it == given.end() ? "" : it->second;
    if (path.empty() && entry->default_file) {
      path = (std::filesystem::path(report_dir) / entry->default_file(stem)).string();
    }
    if (path.empty() || path == "-") continue;
    files.emplace_back(name, std::move(path));
  }
  return files;
}

std::vector<std::string> remove_previous_reports(const std::map<std::string, std::string>& given,
                                                 const std::string& report_dir, const std::string& stem) {
  std::vector<std::string> removed;
  for (const auto& [name, path] : report_files(given, report_dir, stem)) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec) && std::filesystem::remove(path, ec)) removed.push_back(path);
  }
  return removed;
}

std::optional<std::vector<std::string>> open_reporters(const std::map<std::string, std::string>& given,
                                                       const std::string& report_dir, const std::string& stem,
                                                       ReporterMux& into, std::string& error) {
  const ReporterRegistry& registry = ReporterRegistry::get();
  for (const auto& [name, path] : given) {
    if (registry.find(name)) continue;
    error = fmt::format("there is no reporter '{}': the reporters are {}", name, fmt::join(registry.names(), ", "));
    return std::nullopt;
  }
  std::vector<std::string> written;
  for (const auto& [name, path] : report_files(given, report_dir, stem)) {
    into.add(registry.find(name)->factory(path));
    written.push_back(path);
  }
  return written;
}

Outcome run_plan(const Plan& plan, const ExecOptions& options, Shard shard, Reporter& reports,
                 const Listeners& listeners, bool whole_suite) {
  Outcome out;
  RunRecord& run = out.run;
  run = new_run(options, shard);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::optional<ScenarioRecord>> records(plan.items.size());  // a run's, in plan order
  std::optional<KillMatrixBuilder> matrix;
  if (plan.mutants) matrix.emplace(plan);
  RewriteThrottle throttle;
  // `last`: the run's final reports, written whatever the throttle says.
  auto publish = [&](bool complete, bool last) {
    if (!last && !throttle.due()) return;
    if (matrix) {
      run.kill_matrix = matrix->matrix();
    } else {
      run.scenarios.clear();
      for (const auto& r : records) {
        if (r) run.scenarios.push_back(*r);
      }
    }
    run.complete = complete;
    run.seconds = seconds_between(start, std::chrono::steady_clock::now());
    throttle.write([&] {
      try {
        reports.on_run_done(run);
      } catch (const std::exception& e) {
        out.report_errors.push_back(fmt::format("writing reports failed: {}", e.what()));
        if (listeners.report_error) listeners.report_error(out.report_errors.back());
      }
    });
  };
  auto show = [&](const std::vector<KillMatrixRow>& rows) {
    if (!listeners.row) return;
    for (const auto& row : rows) listeners.row(matrix->matrix(), row);
  };
  install_stop_handlers();
  const std::vector<std::size_t> stopped =
      execute(plan, options, listeners.console, [&](std::size_t i, ScenarioRecord r) {
        if (matrix) {
          show(matrix->add(i, std::move(r), run.scenarios));
        } else {
          records[i] = std::move(r);
        }
        publish(false, false);
      });
  out.signal = stop_signal();
  if (out.signal != 0) {
    if (matrix) show(matrix->finish_stopped(run.scenarios));
    std::vector<std::string> names;
    for (std::size_t i : stopped) names.push_back(item_name(plan.items[i], plan.mutants));
    run.incomplete_reason = stop_reason(out.signal, plan.items.size() - stopped.size(), plan.items.size(), names);
  } else if (matrix && whole_suite && shard.total == 1) {
    for (const auto& problem : matrix->require_all_declared()) {
      if (listeners.problem) listeners.problem(problem);
    }
  }
  publish(out.signal == 0, true);
  return out;
}

Ending ending(const Plan& plan, const Outcome& outcome, Shard shard) {
  if (!outcome.report_errors.empty()) return {3, "", false};  // Listeners::report_error said why
  if (outcome.signal != 0) return {128 + outcome.signal, outcome.run.incomplete_reason, true};
  if (plan.mutants) {
    if (outcome.run.count(Status::crashed)) return {3, "", false};
    return {outcome.run.kill_matrix && !outcome.run.kill_matrix->problems.empty() ? 1 : 0, "", false};
  }
  if (plan.items.empty() && shard.total > 1) {
    return {0, fmt::format("shard {} of {} holds no scenario: nothing to run", shard.index, shard.total), false};
  }
  if (plan.runnable() == 0) return {2, "no scenario could run with the mutations given", true};
  return {outcome.run.exit_code(), "", false};
}

}  // namespace graphcheck::session
