#pragma once
// Reporters read records; nothing else. Two kinds, as in Catch2: streaming (console: progress as
// it happens) and cumulative (JSON, JUnit, Markdown, HTML, Chrome trace: the whole document at
// the end, written atomically).
// Torch-free.

#include <functional>
#include <iosfwd>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/engine/driver.h"
#include "graphcheck/engine/record.h"

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

// A cumulative reporter: renders the whole run at its end and writes it atomically to a file.
class FileReporter : public Reporter {
 public:
  using Render = std::string (*)(const RunRecord&);
  FileReporter(std::string path, Render render) : m_path(std::move(path)), m_render(render) {}
  void on_run_done(const RunRecord& run) override;
  [[nodiscard]] const std::string& path() const { return m_path; }

 private:
  std::string m_path;
  Render m_render;
};

// The whole run as JSON (schema: reports/schema/graphcheck-report.schema.json).
class JsonReporter : public FileReporter {
 public:
  explicit JsonReporter(std::string path);
};

// JUnit XML: one testsuite per scenario file, one testcase per scenario (graphcheck mutants: one
// testcase per kill-matrix row).
class JunitReporter : public FileReporter {
 public:
  explicit JunitReporter(std::string path);
};

// GitHub-flavoured Markdown for a PR comment or a CI job summary: a pass/fail table, each
// failure with its evidence, the mutation verdicts, the kill matrix, what ran (versions).
class MarkdownReporter : public FileReporter {
 public:
  explicit MarkdownReporter(std::string path);
};

// One self-contained HTML page (inline CSS, SVG and script; nothing fetched): a memory chart and
// phase timing bars per scenario, findings with evidence, the kill matrix, filters by status.
class HtmlReporter : public FileReporter {
 public:
  explicit HtmlReporter(std::string path);
};

// Chrome trace-event JSON of every scenario's passes and phase windows (Perfetto,
// chrome://tracing): a process per scenario, a thread per pass, findings as instant events.
class TraceReporter : public FileReporter {
 public:
  explicit TraceReporter(std::string path);
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

// Cumulative reporters by name. A front offers one `--NAME PATH` flag per reporter registered
// when it starts (the five built in first, in this order: json, junit, markdown, html, trace),
// and `--report NAME=PATH` for any, so that a plugin's reporter (registered when the plugin
// loads) is reachable too:
//
//   GRAPHCHECK_REGISTER_REPORTER({"csv", "One line per scenario as CSV", nullptr,
//                                 [](const std::string& path) { return std::make_unique<Csv>(path); }});
class ReporterRegistry {
 public:
  struct Entry {
    std::string name;  // the flag's name; [a-z0-9-]+
    std::string help;  // what the report is, for --help
    // The file written by default in the report directory for a run called `stem` ("graphcheck"
    // for run, "mutants" for mutants); null: written only when asked for.
    std::function<std::string(const std::string& stem)> default_file;
    std::function<std::unique_ptr<Reporter>(const std::string& path)> factory;
  };
  static ReporterRegistry& get();
  // Registers once, as models and probes do: a second registration of a name while a plugin
  // loads is that plugin's clash (refused, false, reported by load_plugin()); anywhere else, and
  // for a name that is not [a-z0-9-]+ or an entry without a factory, the program aborts.
  bool add(Entry entry);
  [[nodiscard]] const Entry* find(const std::string& name) const;
  [[nodiscard]] std::vector<std::string> names() const;  // in registration order

 private:
  ReporterRegistry();
  std::vector<Entry> m_entries;
};

// The kill matrix's rows: graphcheck::session::KillMatrixBuilder (graphcheck/engine/session.h).
// Text forms, as the console prints them.
[[nodiscard]] std::string kill_matrix_header(const KillMatrix& matrix);
[[nodiscard]] std::string kill_matrix_line(const KillMatrix& matrix, const KillMatrixRow& row);
// "mutation M on S: caught by a, b [a: observe pass; b: census pass]".
[[nodiscard]] std::string verdict_line(const ScenarioRecord& record, const MutationVerdict& verdict);

[[nodiscard]] std::string json_report(const RunRecord& run);
// One scenario record as one line of JSON (a child process's record, a journal line), and back;
// the reader throws std::runtime_error on text that is not such a record.
[[nodiscard]] std::string scenario_record_json(const ScenarioRecord& record);
[[nodiscard]] ScenarioRecord scenario_record_from_json(const std::string& text);
// A whole JSON report (graphcheck.json, mutants.json) back into its record, for `graphcheck merge`;
// throws std::runtime_error saying what is wrong (not JSON, not a report, another schema version).
[[nodiscard]] RunRecord run_record_from_json(const std::string& text);
[[nodiscard]] std::string junit_report(const RunRecord& run);
[[nodiscard]] std::string markdown_report(const RunRecord& run);
[[nodiscard]] std::string html_report(const RunRecord& run);
[[nodiscard]] std::string chrome_trace(const RunRecord& run);

// Writes `content` to `path` atomically (temp file in the same directory, then rename); creates
// missing parent directories. Throws std::runtime_error naming the path on failure.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace graphcheck

#define GRAPHCHECK_REPORTER_CONCAT_(a, b) a##b
#define GRAPHCHECK_REPORTER_CONCAT(a, b) GRAPHCHECK_REPORTER_CONCAT_(a, b)
#define GRAPHCHECK_REGISTER_REPORTER(...)                                                     \
  static const bool GRAPHCHECK_REPORTER_CONCAT(graphcheck_reporter_registered_, __COUNTER__) = \
      ::graphcheck::ReporterRegistry::get().add(::graphcheck::ReporterRegistry::Entry __VA_ARGS__)
