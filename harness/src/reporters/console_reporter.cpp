#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <ostream>

#include "graphcheck/reporter.h"

namespace graphcheck {

ConsoleReporter::ConsoleReporter(std::ostream& out, bool verbose) : m_out(out), m_verbose(verbose) {}

void ConsoleReporter::on_scenario_start(const Scenario& s, int index, int total) {
  m_last_phase.clear();
  fmt::print(m_out, "[{}/{}] {} ({})\n", index + 1, total, s.name, s.file);
  m_out.flush();
}

void ConsoleReporter::on_phase(const std::string& phase, int cycle, std::int64_t batch_size) {
  // One line per phase kind and cycle; per-batch detail only when verbose.
  std::string key = fmt::format("{}@{}", phase, cycle);
  if (!m_verbose && key == m_last_phase) return;
  m_last_phase = key;
  if (m_verbose && batch_size > 0) {
    fmt::print(m_out, "      {} (cycle {}, batch {})\n", phase, cycle, batch_size);
  } else {
    fmt::print(m_out, "      {}{}\n", phase, cycle > 0 ? fmt::format(" (refit cycle {})", cycle) : "");
  }
  m_out.flush();
}

void ConsoleReporter::on_scenario_done(const ScenarioRecord& r) {
  fmt::print(m_out, "  => {} {} in {:.2f} s{}\n", r.name, to_string(r.status), r.seconds,
             r.mutations.empty() ? "" : fmt::format(" (mutations: {})", fmt::join(r.mutations, ", ")));
  if (!r.reason.empty()) fmt::print(m_out, "     {}\n", r.reason);
  for (const auto& f : r.findings) {
    fmt::print(m_out, "     FAIL [{}] {} (phase {}, cycle {}{})\n", f.probe, f.subject, f.phase,
               f.cycle, f.batch_size ? fmt::format(", batch {}", f.batch_size) : "");
    fmt::print(m_out, "          {}\n", f.message);
    for (const auto& [key, value] : f.evidence) fmt::print(m_out, "          {}: {}\n", key, value);
  }
  m_out.flush();
}

void ConsoleReporter::on_run_done(const RunRecord& run) {
  fmt::print(m_out, "\n{:<32} {:<10} {:<9} {:>8}  {}\n", "scenario", "fixture", "status",
             "seconds", "failed probes");
  for (const auto& r : run.scenarios) {
    std::string probes;
    for (const auto& p : r.failed_probes()) probes += (probes.empty() ? "" : ", ") + p;
    fmt::print(m_out, "{:<32} {:<10} {:<9} {:>8.2f}  {}\n", r.name, r.fixture, to_string(r.status),
               r.seconds, probes.empty() ? "-" : probes);
  }
  fmt::print(m_out, "\n{} scenarios: {} passed, {} failed, {} errors, {} crashed, {} skipped "
                    "({:.1f} s)\n",
             run.scenarios.size(), run.count(Status::passed), run.count(Status::failed),
             run.count(Status::error), run.count(Status::crashed), run.count(Status::skipped),
             run.seconds);
  m_out.flush();
}

}  // namespace graphcheck
