#pragma once
// Reporters read records; nothing else. Two kinds, as in Catch2: streaming (console: progress as
// it happens) and cumulative (JSON, JUnit: the whole document at the end, written atomically).
// Torch-free.

#include <iosfwd>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/driver.h"
#include "graphcheck/record.h"

namespace graphcheck {

class Reporter : public ProgressListener {
 public:
  // After the last scenario.
  virtual void on_run_done(const RunRecord& run) = 0;
};

// Streams progress per scenario and phase, then a summary table and each failure's evidence.
class ConsoleReporter : public Reporter {
 public:
  explicit ConsoleReporter(std::ostream& out, bool verbose = false);
  void on_scenario_start(const Scenario& scenario, int index, int total) override;
  void on_phase(const std::string& phase, int cycle, std::int64_t batch_size) override;
  void on_scenario_done(const ScenarioRecord& record) override;
  void on_run_done(const RunRecord& run) override;

 private:
  void end_line();

  std::ostream& m_out;
  bool m_verbose;
  bool m_line_open = false;
  int m_line_cycle = -1;
  std::set<std::string> m_line_phases;
};

// Writes the whole run as JSON (schema: reports/schema/graphcheck-report.schema.json).
class JsonReporter : public Reporter {
 public:
  explicit JsonReporter(std::string path) : m_path(std::move(path)) {}
  void on_run_done(const RunRecord& run) override;

 private:
  std::string m_path;
};

// JUnit XML: one testsuite per scenario file, one testcase per scenario.
class JunitReporter : public Reporter {
 public:
  explicit JunitReporter(std::string path) : m_path(std::move(path)) {}
  void on_run_done(const RunRecord& run) override;

 private:
  std::string m_path;
};

// Owns reporters and forwards every event to each, in order.
class ReporterMux : public Reporter {
 public:
  void add(std::unique_ptr<Reporter> reporter) { m_reporters.push_back(std::move(reporter)); }
  void on_scenario_start(const Scenario& scenario, int index, int total) override;
  void on_phase(const std::string& phase, int cycle, std::int64_t batch_size) override;
  void on_scenario_done(const ScenarioRecord& record) override;
  void on_run_done(const RunRecord& run) override;

 private:
  std::vector<std::unique_ptr<Reporter>> m_reporters;
};

// The kill matrix's row for one record: `mutation` "" for the clean run; `clean_failed`: probes
// that failed the clean run (never credited).
[[nodiscard]] KillMatrixRow kill_matrix_row(const KillMatrix& matrix, const ScenarioRecord& record,
                                            const std::string& mutation,
                                            const std::set<std::string>& clean_failed);
// Text forms, as the console prints them.
[[nodiscard]] std::string kill_matrix_header(const KillMatrix& matrix);
[[nodiscard]] std::string kill_matrix_line(const KillMatrix& matrix, const KillMatrixRow& row);
// "mutation M on S: caught by a, b [a: observe pass; b: census pass]".
[[nodiscard]] std::string verdict_line(const ScenarioRecord& record, const MutationVerdict& verdict);

[[nodiscard]] std::string json_report(const RunRecord& run);
[[nodiscard]] std::string junit_report(const RunRecord& run);

// Writes `content` to `path` atomically (temp file in the same directory, then rename); creates
// missing parent directories. Throws std::runtime_error naming the path on failure.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace graphcheck
