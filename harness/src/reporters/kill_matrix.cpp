// The kill matrix's text form (its rows are computed by the session: session/verdicts.cpp).

#include <fmt/format.h>
#include <fmt/ranges.h>


#include "graphcheck/engine/reporter.h"

namespace graphcheck {

std::string kill_matrix_header(const KillMatrix& matrix) {
  std::string line = fmt::format("{:<30} {:<34}", "scenario", "mutation");
  for (const auto& p : matrix.probes) line += fmt::format(" {:>11}", p);
  return line + "  verdict";
}

std::string kill_matrix_line(const KillMatrix& matrix, const KillMatrixRow& row) {
  std::string line = fmt::format("{:<30} {:<34}", row.scenario, row.mutation.empty() ? "(clean)" : row.mutation);
  for (const auto& p : matrix.probes) {
    auto it = row.cells.find(p);
    std::string cell = it == row.cells.end() ? "." : it->second;
    if (cell.rfind("KILLED:", 0) == 0) cell = cell.substr(7);                      // the pass
    else if (cell.rfind("failed:", 0) == 0) cell = "(" + cell.substr(7) + ")";    // undeclared
    line += fmt::format(" {:>11}", cell);
  }
  return line + "  " + row.verdict;
}

std::string verdict_line(const ScenarioRecord& r, const MutationVerdict& v) {
  std::vector<std::string> where;
  for (const auto& [probe, pass] : v.caught) where.push_back(fmt::format("{}: {} pass", probe, pass));
  const std::string passes = where.empty() ? "" : fmt::format(" [{}]", fmt::join(where, "; "));
  if (!v.declared) {
    return fmt::format("mutation {} on {}: not declared by the scenario; probes that caught it: {}",
                       v.mutation, r.name, where.empty() ? std::string("none") : fmt::format("{}", fmt::join(where, "; ")));
  }
  if (v.missed.empty()) {
    return fmt::format("mutation {} on {}: caught by {}{}", v.mutation, r.name, fmt::join(v.expected, ", "), passes);
  }
  return fmt::format("mutation {} on {}: NOT caught by declared probe(s) {}{}", v.mutation, r.name,
                     fmt::join(v.missed, ", "), passes);
}

}  // namespace graphcheck
