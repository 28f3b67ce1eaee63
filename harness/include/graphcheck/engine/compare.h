#pragma once
// graphcheck compare: two JSON reports of the same suite (a nightly run against the last good
// one), what changed between them, and whether that is a regression. Torch-free.

#include <stdexcept>
#include <string>
#include <vector>

namespace graphcheck {

// A report file that cannot be read or is not a graphcheck JSON report; the message names it.
class ReportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CompareOptions {
  double max_regression_pct = 10;  // a figure that grows by more than this is a regression
  double min_seconds = 0.005;      // ... and by at least this much time (smaller is noise)
  double min_bytes = 1024;         // ... or this much memory
};

// One scenario's figure in both reports.
struct MetricChange {
  std::string scenario;  // the name, with its mutations in brackets
  std::string metric;    // "time" (model time, observe pass) or "peak memory"
  std::string phase;     // lifecycle phase, or "scenario" for the scenario's wall time
  double base = 0;
  double now = 0;
  [[nodiscard]] double percent() const { return base > 0 ? 100 * (now - base) / base : 0; }
};

// A scenario whose status or failing probes changed.
struct StatusChange {
  std::string scenario;
  std::string base_status;
  std::string new_status;
  std::vector<std::string> new_probes;    // failing now, not in the base
  std::vector<std::string> fixed_probes;  // failing in the base, not now
  std::string detail;                     // the first new finding or the reason, for the reader
};

struct Comparison {
  std::string base_path, new_path;
  std::string base_label, new_label;  // "graphcheck 0.3.0, started 2026-12-01T09:00:00Z"
  CompareOptions options;
  std::vector<StatusChange> new_failures;   // passed (or absent) in the base, not passed now
  std::vector<StatusChange> fixed;          // not passed in the base, passed now
  std::vector<StatusChange> still_failing;  // not passed in either
  std::vector<MetricChange> regressions;    // beyond the threshold
  std::vector<MetricChange> improvements;   // shrunk by more than the threshold
  std::vector<std::string> added, removed;  // scenarios in one report only
  std::size_t compared = 0;                 // scenarios in both
  // Why a report is marked incomplete (a run stopped or crashed); empty when it is complete.
  std::string base_incomplete, new_incomplete;
  // A new failure, a figure beyond the threshold, or an incomplete new run (what it did not run
  // is unjudged): `graphcheck compare` exits 1.
  [[nodiscard]] bool regressed() const {
    return !new_failures.empty() || !regressions.empty() || !new_incomplete.empty();
  }
};

// Reads both reports (throws ReportError naming the file) and compares them.
[[nodiscard]] Comparison compare_report_files(const std::string& base_path, const std::string& new_path,
                                              const CompareOptions& options = {});
// The same from the reports' text (`base_path`/`new_path` only name them in messages).
[[nodiscard]] Comparison compare_reports(const std::string& base_json, const std::string& base_path,
                                         const std::string& new_json, const std::string& new_path,
                                         const CompareOptions& options = {});
// The comparison as Markdown (a PR comment, a CI job summary).
[[nodiscard]] std::string comparison_markdown(const Comparison& comparison);

}  // namespace graphcheck
