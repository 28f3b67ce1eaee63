#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <ostream>

#include "graphcheck/engine/reporter.h"
#include "report_views.h"

namespace graphcheck {

ConsoleReporter::ConsoleReporter(std::ostream& out, bool verbose) : m_out(out), m_verbose(verbose) {}

void ConsoleReporter::on_scenario_start(const Scenario& s, int index, int total) {
  end_line();
  fmt::print(m_out, "[{}/{}] {} ({})\n", index + 1, total, s.name, s.file);
  m_out.flush();
}

void ConsoleReporter::on_phase(const std::string& phase, int cycle, std::int64_t batch_size) {
  if (m_verbose) {
    fmt::print(m_out, "      {} (cycle {}{})\n", phase, cycle,
               batch_size > 0 ? fmt::format(", batch {}", batch_size) : "");
    m_out.flush();
    return;
  }
  // One line per cycle listing its phases as they start.
  if (cycle != m_line_cycle) {
    if (m_line_open) fmt::print(m_out, "\n");
    fmt::print(m_out, "      {}:", cycle == 0 ? std::string("initial") : fmt::format("cycle {}", cycle));
    m_line_cycle = cycle;
    m_line_open = true;
    m_line_phases.clear();
  }
  if (m_line_phases.insert(phase).second) fmt::print(m_out, " {}", phase);
  m_out.flush();
}

void ConsoleReporter::end_line() {
  if (m_line_open) fmt::print(m_out, "\n");
  m_line_open = false;
  m_line_cycle = -1;
}

void ConsoleReporter::on_scenario_done(const ScenarioRecord& r) {
  end_line();
  fmt::print(m_out, "  => {} {} in {:.2f} s{}{}\n", r.name, to_string(r.status), r.seconds,
             r.backend.empty() ? "" : fmt::format(" on {}", r.backend),
             r.mutations.empty() ? "" : fmt::format(" (mutations: {})", fmt::join(r.mutations, ", ")));
  if (!r.reason.empty()) fmt::print(m_out, "     {}\n", r.reason);
  for (const auto& w : r.warnings) fmt::print(m_out, "     warning: {}\n", w);
  if (r.crash && !r.crash->stderr_tail.empty()) {
    // The last lines of the crashed process's output.
    std::vector<std::string> lines;
    std::string line;
    for (char c : r.crash->stderr_tail) {
      if (c == '\n') {
        lines.push_back(line);
        line.clear();
      } else {
        line += c;
      }
    }
    lines.push_back(line);
    const std::size_t from = lines.size() > 12 ? lines.size() - 12 : 0;
    fmt::print(m_out, "     its output ends:\n");
    for (std::size_t i = from; i < lines.size(); ++i) fmt::print(m_out, "       | {}\n", lines[i]);
  }
  const auto print_finding = [&](const Finding& f, const char* indent) {
    fmt::print(m_out, "{}FAIL [{}] {} ({}phase {}, cycle {}{})\n", indent, f.probe, f.subject,
               f.pass.empty() ? "" : fmt::format("{} pass, ", f.pass), f.phase, f.cycle,
               f.batch_size ? fmt::format(", batch {}", f.batch_size) : "");
    fmt::print(m_out, "{}     {}\n", indent, f.message);
    for (const auto& [key, value] : f.evidence) fmt::print(m_out, "{}     {}: {}\n", indent, key, value);
  };
  // Causes first (Note [Triage]): each with its primary finding; the corroborating findings are
  // counted, and listed with -v (the JSON and HTML reports hold them all).
  if (!r.causes.empty()) {
    fmt::print(m_out, "     {}:\n", report::causes_heading(r));
    for (std::size_t k = 0; k < r.causes.size(); ++k) {
      const Cause& c = r.causes[k];
      fmt::print(m_out, "     CAUSE {}: {}\n", k + 1, c.summary);
      fmt::print(m_out, "          first seen {}; rerun: {}\n", report::first_seen(c), c.repro);
      if (!c.findings.empty() && c.findings.front() < r.findings.size()) {
        print_finding(r.findings[c.findings.front()], "          ");
      }
      if (const std::string more = report::corroboration(r, c); !more.empty()) {
        fmt::print(m_out, "          and {} corroborating finding{}: {}{}\n", c.findings.size() - 1,
                   c.findings.size() == 2 ? "" : "s", more, m_verbose ? "" : " (-v lists them)");
      }
    }
  }
  if (r.causes.empty() || m_verbose) {
    if (!r.causes.empty()) fmt::print(m_out, "     every finding:\n");
    for (const auto& f : r.findings) print_finding(f, "     ");
  }
  for (const auto& v : r.verdicts) fmt::print(m_out, "  {}\n", verdict_line(r, v));
  m_out.flush();
}

void ConsoleReporter::on_run_done(const RunRecord& run) {
  fmt::print(m_out, "\n{:<32} {:<12} {:<9} {:>8}  {}\n", "scenario", "fixture", "status",
             "seconds", "failed probes");
  for (const auto& r : run.scenarios) {
    std::string probes;
    for (const auto& p : r.failed_probes()) probes += (probes.empty() ? "" : ", ") + p;
    fmt::print(m_out, "{:<32} {:<12} {:<9} {:>8.2f}  {}\n", r.name, r.fixture, to_string(r.status),
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
