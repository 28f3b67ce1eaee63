// Reporters against golden files, the views they draw from, and graphcheck compare. Torch-free.
//
// The golden files hold every reporter's rendering of one synthetic run record (fixed times, no
// addresses to normalise). After an intended change: GRAPHCHECK_UPDATE_GOLDEN=1 ctest -R golden
// rewrites them; review the diff like code.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graphcheck/engine/compare.h"
#include "graphcheck/engine/reporter.h"
#include "graphcheck/engine/session.h"
#include "reporters/report_views.h"
#include "temp_dir_test.h"

namespace gc = graphcheck;
namespace fs = std::filesystem;

namespace {

gc::Span span(std::string pass, std::string phase, int cycle, std::int64_t b, double start, double seconds) {
  return {std::move(pass), std::move(phase), cycle, b, start, seconds};
}

gc::Measurement measure(std::string tag, double value, std::string unit, std::string phase, int cycle,
                        std::int64_t b, std::string pass = "observe") {
  gc::Measurement m;
  m.tag = std::move(tag);
  m.value = value;
  m.unit = std::move(unit);
  m.phase = std::move(phase);
  m.cycle = cycle;
  m.batch_size = b;
  m.pass = std::move(pass);
  return m;
}

gc::ScenarioRecord passing_record() {
  gc::ScenarioRecord r;
  r.name = "tiny-refit";
  r.file = "scenarios/tiny.yaml";
  r.description = "A two-layer model, one refit.";
  r.fixture = "tiny";
  r.backend = "emulated";
  r.backend_reason = "auto: no CUDA in this build";
  r.passes = {"validate", "observe"};
  r.probes = {"address", "memory"};
  r.start = 0;
  r.seconds = 0.25;
  r.spans = {span("validate", "", 0, 0, 0.0, 0.1),       span("validate", "construct", 0, 0, 0.0, 0.01),
             span("validate", "load", 0, 0, 0.01, 0.03), span("validate", "capture", 0, 1, 0.05, 0.04),
             span("observe", "", 0, 0, 0.1, 0.15),       span("observe", "load", 0, 0, 0.1, 0.02),
             span("observe", "pwal", 0, 0, 0.12, 0.01),  span("observe", "capture", 0, 1, 0.13, 0.03),
             span("observe", "replay", 0, 1, 0.16, 0.01), span("observe", "refit", 1, 0, 0.18, 0.05),
             span("observe", "load", 1, 0, 0.18, 0.03),   span("observe", "pwal", 1, 0, 0.21, 0.01),
             span("observe", "replay", 1, 1, 0.235, 0.01)};
  r.measurements = {
      measure("gc/timing/load", 0.015, "s", "load", 0, 0),
      measure("gc/memory/load/live_bytes", 4096, "bytes", "load", 0, 0),
      measure("gc/memory/load/peak_bytes", 8192, "bytes", "load", 0, 0),
      measure("gc/timing/pwal", 0.008, "s", "pwal", 0, 0),
      measure("gc/memory/pwal/live_bytes", 6144, "bytes", "pwal", 0, 0),
      measure("gc/memory/pwal/peak_bytes", 6144, "bytes", "pwal", 0, 0),
      measure("gc/timing/capture", 0.025, "s", "capture", 0, 1),
      measure("gc/memory/capture/live_bytes", 10240, "bytes", "capture", 0, 1),
      measure("gc/memory/capture/peak_bytes", 12288, "bytes", "capture", 0, 1),
      measure("gc/timing/load", 0.02, "s", "load", 1, 0),
      measure("gc/memory/load/live_bytes", 10240, "bytes", "load", 1, 0),
      measure("gc/memory/load/peak_bytes", 16384, "bytes", "load", 1, 0),
      measure("gc/timing/refit", 0.045, "s", "refit", 1, 0),
      measure("gc/memory/refit/live_bytes", 10240, "bytes", "refit", 1, 0),
      measure("gc/memory/refit/peak_bytes", 16384, "bytes", "refit", 1, 0),
      measure("gc/pass/observe/seconds", 0.15, "s", "scenario", 0, 0, ""),
  };
  return r;
}

gc::ScenarioRecord failing_record() {
  gc::ScenarioRecord r = passing_record();
  r.name = "tiny-refit";
  r.mutations = {"tiny.rebind_<weight>"};
  r.expected_catches = {{"tiny.rebind_<weight>", {"address", "replay_diff"}}};
  r.status = gc::Status::failed;
  r.start = 0.25;
  gc::Finding f;
  f.probe = "address";
  f.pass = "observe";
  f.phase = "refit";
  f.cycle = 1;
  f.subject = "layers.0.w|<scale>";
  f.message = "tensor 'layers.0.w' moved from 0x7f00deadbeef to 0x7f00cafef00d: a graph reads the old one & the "
              "refit wrote the new one; copy_() into it instead of `w = new`";
  f.evidence = {{"tensor", "layers.0.w|<scale>"}, {"old_address", "0x7f00deadbeef"}, {"new_address", "0x7f00cafef00d"},
                {"bytes", "4096"}};
  r.findings.push_back(f);
  gc::Finding stale;  // a symptom with no tensor of its own: corroboration of the address finding
  stale.probe = "replay_diff";
  stale.pass = "observe";
  stale.phase = "compare";
  stale.cycle = 1;
  stale.batch_size = 1;
  stale.subject = "replay vs eager(A)";
  stale.message = "replay(A) ≠ eager(A) (max abs 0.5) at batch size 1 after refit cycle 1: the captured graph reads "
                  "stale memory";
  stale.evidence = {{"max_abs", "0.5"}};
  r.findings.push_back(stale);
  r.causes = gc::session::triage(r, "graphcheck run scenarios/tiny.yaml --mutation 'tiny.rebind_<weight>'");
  gc::MutationVerdict v;
  v.mutation = "tiny.rebind_<weight>";
  v.declared = true;
  v.expected = {"address", "replay_diff"};
  v.caught = {{"address", "observe"}};
  v.missed = {"replay_diff"};
  r.verdicts.push_back(v);
  return r;
}

gc::ScenarioRecord error_record() {
  gc::ScenarioRecord r;
  r.name = "broken";
  r.file = "scenarios/broken.yaml";
  r.fixture = "tiny";
  r.status = gc::Status::error;
  r.reason = "broken.yaml:3:1: unknown key 'captur' in scenario file (did you mean 'capture'?)";
  r.start = 0.5;
  r.seconds = 0.001;
  return r;
}

gc::RunRecord sample_run(bool mutants) {
  gc::RunRecord run;
  run.tool_version = "0.1.0";
  run.started_at = "2026-12-01T00:00:00Z";
  run.threads = 1;
  run.environment = {{"graphcheck", "0.1.0"}, {"libtorch", "2.13.0"}, {"backend", "emulated (test)"}};
  run.seconds = 0.6;
  run.scenarios = {passing_record(), failing_record(), error_record()};
  if (mutants) {
    gc::KillMatrix m;
    m.probes = {"address", "replay_diff", "driver"};
    gc::KillMatrixRow clean;
    clean.scenario = "tiny-refit";
    clean.cells = {{"address", "."}, {"replay_diff", "."}, {"driver", "."}};
    clean.verdict = "ok";
    gc::KillMatrixRow mutated;
    mutated.scenario = "tiny-refit";
    mutated.mutation = "tiny.rebind_<weight>";
    mutated.cells = {{"address", "KILLED:observe"}, {"replay_diff", "MISSED"}, {"driver", "failed:observe"}};
    mutated.verdict = "FAIL: not caught by replay_diff";
    m.rows = {clean, mutated};
    m.problems = {"tiny-refit tiny.rebind_<weight>: FAIL: not caught by replay_diff"};
    run.kill_matrix = m;
  }
  return run;
}

std::string console_report(const gc::RunRecord& run) {
  std::ostringstream out;
  gc::ConsoleReporter console(out);
  for (const auto& r : run.scenarios) console.on_scenario_done(r);
  console.on_run_done(run);
  return out.str();
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_golden(const std::string& actual, const std::string& name) {
  const fs::path golden = fs::path(GRAPHCHECK_GOLDEN_DIR) / name;
  const char* update = std::getenv("GRAPHCHECK_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(golden, std::ios::binary) << actual;
    GTEST_SKIP() << "rewrote " << golden;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing: GRAPHCHECK_UPDATE_GOLDEN=1 writes it";
  const std::string want = read(golden);
  if (actual == want) return;
  // The first differing line, for the reader.
  std::istringstream a(actual), w(want);
  std::string la, lw;
  int line = 1;
  while (std::getline(a, la) && std::getline(w, lw) && la == lw) ++line;
  ADD_FAILURE() << name << " differs from the golden file at line " << line << ":\n  golden: " << lw
                << "\n  actual: " << la << "\n(GRAPHCHECK_UPDATE_GOLDEN=1 rewrites it when the change is intended)";
}

}  // namespace

TEST(ReporterGolden, Json) { expect_golden(gc::json_report(sample_run(false)), "run.json"); }
TEST(ReporterGolden, Junit) { expect_golden(gc::junit_report(sample_run(false)), "run.junit.xml"); }
TEST(ReporterGolden, Markdown) { expect_golden(gc::markdown_report(sample_run(false)), "run.md"); }
TEST(ReporterGolden, Html) { expect_golden(gc::html_report(sample_run(false)), "run.html"); }
TEST(ReporterGolden, ChromeTrace) { expect_golden(gc::chrome_trace(sample_run(false)), "run-trace.json"); }
TEST(ReporterGolden, Console) { expect_golden(console_report(sample_run(false)), "run.console.txt"); }
TEST(ReporterGolden, MutantsJson) { expect_golden(gc::json_report(sample_run(true)), "mutants.json"); }
TEST(ReporterGolden, MutantsJunit) { expect_golden(gc::junit_report(sample_run(true)), "mutants.junit.xml"); }
TEST(ReporterGolden, MutantsMarkdown) { expect_golden(gc::markdown_report(sample_run(true)), "mutants.md"); }
TEST(ReporterGolden, MutantsHtml) { expect_golden(gc::html_report(sample_run(true)), "mutants.html"); }

// ---- what every report must say ------------------------------------------------------------

TEST(Reporters, EveryFormatHoldsTheKillMatrixAndTheVerdict) {
  const gc::RunRecord run = sample_run(true);
  for (const auto& [format, text] : {std::pair{"json", gc::json_report(run)}, {"junit", gc::junit_report(run)},
                                     {"markdown", gc::markdown_report(run)}, {"html", gc::html_report(run)}}) {
    SCOPED_TRACE(format);
    EXPECT_NE(text.find("not caught by replay_diff"), std::string::npos);
    EXPECT_NE(text.find("MISSED"), std::string::npos);
  }
}

TEST(Reporters, MarkupInNamesIsEscaped) {
  const gc::RunRecord run = sample_run(true);
  const std::string html = gc::html_report(run);
  EXPECT_EQ(html.find("<weight>"), std::string::npos);
  EXPECT_NE(html.find("tiny.rebind_&lt;weight&gt;"), std::string::npos);
  const std::string md = gc::markdown_report(run);
  EXPECT_EQ(md.find("layers.0.w|<scale>"), std::string::npos);  // a pipe would split a table cell
  EXPECT_NE(md.find("`layers.0.w\\|<scale>`"), std::string::npos);  // a code span shows < as it is
  EXPECT_NE(md.find("tiny-refit [tiny.rebind_&lt;weight&gt;]"), std::string::npos);  // text: defused
}

TEST(Reporters, NonUtf8NamesDoNotBreakTheJsonReport) {
  gc::RunRecord run = sample_run(false);
  run.scenarios[0].name = "bad\xff\xfename";
  const std::string json = gc::json_report(run);
  EXPECT_NE(json.find("bad\xEF\xBF\xBD\xEF\xBF\xBDname"), std::string::npos);  // U+FFFD twice
  EXPECT_NO_THROW((void)gc::chrome_trace(run));
}

TEST(Reporters, MarkdownLeadsWithTheCausesAndCountsTheCorroboration) {
  gc::RunRecord run = sample_run(false);
  auto& r = run.scenarios[1];
  for (int i = 0; i < 9; ++i) r.findings.push_back(r.findings.front());
  r.causes = gc::session::triage(r, "graphcheck run scenarios/tiny.yaml");
  const std::string md = gc::markdown_report(run);
  EXPECT_NE(md.find("**1 cause (11 findings)**"), std::string::npos) << md;
  EXPECT_NE(md.find("and 10 corroborating findings: address ×9, replay_diff ×1"), std::string::npos) << md;
  EXPECT_NE(md.find("rerun: `graphcheck run scenarios/tiny.yaml`"), std::string::npos) << md;
  // A record without triage (from an older report): the first findings, and a count of the rest.
  r.causes.clear();
  const std::string flat = gc::markdown_report(run);
  EXPECT_NE(flat.find("… and 6 more findings (address, replay_diff;"), std::string::npos) << flat;
}

using ReportFiles = gc::testing::TempDirTest;

TEST_F(ReportFiles, FileReportersWriteAtomicallyAndNameTheFileOnFailure) {
  const fs::path dir = m_dir;
  const gc::RunRecord run = sample_run(false);
  gc::MarkdownReporter md((dir / "sub" / "r.md").string());
  md.on_run_done(run);
  EXPECT_EQ(read(dir / "sub" / "r.md"), gc::markdown_report(run));
  // A directory where the file should be.
  fs::create_directories(dir / "taken.html");
  gc::HtmlReporter html((dir / "taken.html").string());
  try {
    html.on_run_done(run);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("taken.html"), std::string::npos) << e.what();
  }
}

// A run that stops before its reports (a scenario that does not parse: exit 2) leaves none of an
// earlier run's behind to be read as its own; files that are no report of this run stay.
TEST_F(ReportFiles, ARunRemovesTheReportsAnEarlierRunLeftWhereItWritesItsOwn) {
  const fs::path dir = m_dir;
  for (const char* name : {"graphcheck.md", "junit.xml", "graphcheck.json", "mutants.md", "notes.txt"}) {
    std::ofstream(dir / name) << "an earlier run's\n";
  }
  const std::string elsewhere = (dir / "elsewhere.html").string();
  std::ofstream(elsewhere) << "an earlier run's\n";
  const auto removed = gc::session::remove_previous_reports({{"json", "-"}, {"html", elsewhere}}, dir.string(), "graphcheck");
  EXPECT_FALSE(fs::exists(dir / "graphcheck.md"));
  EXPECT_FALSE(fs::exists(dir / "junit.xml"));
  EXPECT_FALSE(fs::exists(elsewhere));           // at the path given
  EXPECT_TRUE(fs::exists(dir / "graphcheck.json"));  // '-': this run writes no JSON
  EXPECT_TRUE(fs::exists(dir / "mutants.md"));       // another run's
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_EQ(std::count(removed.begin(), removed.end(), elsewhere), 1);
}

// ---- views ---------------------------------------------------------------------------------

TEST(ReportViews, SpansNestByTime) {
  const gc::ScenarioRecord r = passing_record();
  const auto rows = gc::report::span_rows(r);
  ASSERT_EQ(rows.size(), r.spans.size());
  EXPECT_EQ(rows[0].depth, 0);   // validate pass
  EXPECT_EQ(rows[1].depth, 1);   // construct inside it
  EXPECT_EQ(rows[2].depth, 1);   // load after construct ended
  EXPECT_EQ(rows[4].depth, 0);   // observe pass
  EXPECT_EQ(rows[9].depth, 1);   // refit cycle 1
  EXPECT_EQ(rows[10].depth, 2);  // its load
  EXPECT_EQ(rows[11].depth, 2);  // its pwal
  EXPECT_EQ(rows[12].depth, 1);  // the replay after the refit
}

TEST(ReportViews, MemorySeriesPairsLiveAndPeakPerWindow) {
  const auto points = gc::report::memory_series(passing_record());
  ASSERT_EQ(points.size(), 5u);
  EXPECT_EQ(points[2].label(), "capture b=1 (initial)");
  EXPECT_EQ(points[2].live_bytes, 10240);
  EXPECT_EQ(points[2].peak_bytes, 12288);
  EXPECT_EQ(points[3].label(), "load (refit 1)");
}

TEST(ReportViews, PhaseTimesSumObservePassWindows) {
  const auto times = gc::report::phase_times(passing_record());
  ASSERT_EQ(times.size(), 4u);
  EXPECT_EQ(times[0].phase, "load");
  EXPECT_DOUBLE_EQ(times[0].seconds, 0.035);
  EXPECT_EQ(times[0].windows, 2);
}

TEST(ReportViews, Formats) {
  EXPECT_EQ(gc::report::format_bytes(512), "512 B");
  EXPECT_EQ(gc::report::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(gc::report::format_bytes(2.0 * (1ull << 30)), "2.00 GiB");
  EXPECT_EQ(gc::report::format_seconds(1.234), "1.23 s");
  EXPECT_EQ(gc::report::format_seconds(0.0456), "45.6 ms");
  EXPECT_EQ(gc::report::format_seconds(0.000789), "789 µs");
  EXPECT_EQ(gc::report::cell_text("KILLED:census"), "KILLED (census)");
  EXPECT_EQ(gc::report::cell_text("failed:observe"), "(observe)");
  EXPECT_EQ(gc::report::cell_text("."), "");
}

// ---- compare -------------------------------------------------------------------------------

namespace {

gc::RunRecord two_passing() {
  gc::RunRecord run = sample_run(false);
  run.scenarios = {passing_record(), passing_record()};
  run.scenarios[1].name = "tiny-other";
  return run;
}

void scale_timing(gc::ScenarioRecord& r, const std::string& phase, double factor) {
  for (auto& m : r.measurements) {
    if (m.tag == "gc/timing/" + phase) m.value *= factor;
  }
}

}  // namespace

TEST(Compare, SameReportIsNoRegression) {
  const std::string json = gc::json_report(two_passing());
  const gc::Comparison c = gc::compare_reports(json, "base.json", json, "new.json");
  EXPECT_FALSE(c.regressed());
  EXPECT_EQ(c.compared, 2u);
  EXPECT_NE(gc::comparison_markdown(c).find("no regression"), std::string::npos);
}

TEST(Compare, FlagsAPlantedTimingAndMemoryRegressionPerScenarioAndPhase) {
  const gc::RunRecord base = two_passing();
  gc::RunRecord now = base;
  scale_timing(now.scenarios[1], "capture", 2.0);  // 25 ms -> 50 ms
  for (auto& m : now.scenarios[1].measurements) {
    if (m.tag == "gc/memory/load/peak_bytes" && m.cycle == 1) m.value = 65536;  // 16 KiB -> 64 KiB
  }
  gc::CompareOptions options;
  options.max_regression_pct = 10;
  const gc::Comparison c = gc::compare_reports(gc::json_report(base), "base.json", gc::json_report(now), "new.json", options);
  EXPECT_TRUE(c.regressed());
  ASSERT_EQ(c.regressions.size(), 2u) << gc::comparison_markdown(c);
  EXPECT_EQ(c.regressions[0].scenario, "tiny-other");
  EXPECT_EQ(c.regressions[0].metric, "time");
  EXPECT_EQ(c.regressions[0].phase, "capture");
  EXPECT_DOUBLE_EQ(c.regressions[0].percent(), 100);
  EXPECT_EQ(c.regressions[1].metric, "peak memory");
  EXPECT_EQ(c.regressions[1].phase, "load");
  const std::string md = gc::comparison_markdown(c);
  EXPECT_NE(md.find("REGRESSED (2 regressions beyond +10%)"), std::string::npos) << md;
  EXPECT_NE(md.find("| tiny-other | time | capture | 25.0 ms | 50.0 ms | +100.0% |"), std::string::npos) << md;
}

TEST(Compare, GrowthWithinTheThresholdOrBelowTheNoiseFloorIsNot) {
  const gc::RunRecord base = two_passing();
  gc::RunRecord now = base;
  scale_timing(now.scenarios[0], "capture", 1.08);  // +8% < 10%
  scale_timing(now.scenarios[0], "pwal", 1.5);      // +50%, but 4 ms < the 5 ms floor
  const gc::Comparison c = gc::compare_reports(gc::json_report(base), "b", gc::json_report(now), "n");
  EXPECT_FALSE(c.regressed()) << gc::comparison_markdown(c);
  gc::CompareOptions strict;
  strict.max_regression_pct = 5;
  strict.min_seconds = 0;
  const gc::Comparison s = gc::compare_reports(gc::json_report(base), "b", gc::json_report(now), "n", strict);
  EXPECT_EQ(s.regressions.size(), 2u) << gc::comparison_markdown(s);
}

TEST(Compare, NewAndFixedFailures) {
  gc::RunRecord base = two_passing();
  gc::RunRecord now = base;
  now.scenarios[0].status = gc::Status::failed;
  now.scenarios[0].findings = failing_record().findings;
  base.scenarios[1].status = gc::Status::failed;
  base.scenarios[1].findings = failing_record().findings;
  const gc::Comparison c = gc::compare_reports(gc::json_report(base), "b", gc::json_report(now), "n");
  EXPECT_TRUE(c.regressed());
  ASSERT_EQ(c.new_failures.size(), 1u);
  EXPECT_EQ(c.new_failures[0].scenario, "tiny-refit");
  EXPECT_EQ(c.new_failures[0].new_probes, (std::vector<std::string>{"address", "replay_diff"}));
  ASSERT_EQ(c.fixed.size(), 1u);
  EXPECT_EQ(c.fixed[0].scenario, "tiny-other");
  const std::string md = gc::comparison_markdown(c);
  EXPECT_NE(md.find("### New failures"), std::string::npos);
  EXPECT_NE(md.find("### Fixed"), std::string::npos);
}

TEST(Compare, AddedAndRemovedScenariosAreListed) {
  gc::RunRecord base = two_passing();
  gc::RunRecord now = base;
  now.scenarios[1].name = "tiny-new";
  now.scenarios[1].status = gc::Status::crashed;
  const gc::Comparison c = gc::compare_reports(gc::json_report(base), "b", gc::json_report(now), "n");
  EXPECT_EQ(c.added, std::vector<std::string>{"tiny-new"});
  EXPECT_EQ(c.removed, std::vector<std::string>{"tiny-other"});
  ASSERT_EQ(c.new_failures.size(), 1u);  // a new scenario that crashes is a new failure
  EXPECT_EQ(c.new_failures[0].base_status, "(absent)");
}

TEST_F(ReportFiles, BadReportsNameTheFileAndTheProblem) {
  const std::string good = gc::json_report(two_passing());
  auto message = [&](const std::string& text) {
    try {
      (void)gc::compare_reports(good, "base.json", text, "new.json");
    } catch (const gc::ReportError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{").find("new.json: not JSON"), std::string::npos);
  EXPECT_NE(message("[]").find("new.json: not a graphcheck JSON report"), std::string::npos);
  EXPECT_NE(message(R"({"tool": "graphcheck", "json_schema_version": 99, "scenarios": []})").find("JSON schema version 99"),
            std::string::npos);
  EXPECT_NE(message(R"({"tool": "graphcheck", "json_schema_version": 3})").find("'scenarios' is missing"),
            std::string::npos);
  EXPECT_NE(message(R"({"tool": "graphcheck", "json_schema_version": 3, "scenarios": [{"name": 5}]})")
                .find("new.json: scenarios[0]: 'name' has the wrong type (number)"),
            std::string::npos);
  const fs::path dir = m_dir;
  try {
    (void)gc::compare_report_files(dir.string(), dir.string());
    FAIL() << "no error";
  } catch (const gc::ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  try {
    (void)gc::compare_report_files((dir / "nope.json").string(), "x");
    FAIL() << "no error";
  } catch (const gc::ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.json: no such file"), std::string::npos) << e.what();
  }
}

TEST(Compare, AnIncompleteNewRunIsARegression) {
  const gc::RunRecord base = two_passing();
  gc::RunRecord now = base;
  now.complete = false;
  now.incomplete_reason = "stopped by SIGTERM (Terminated) after 1 of 2 runs finished";
  now.scenarios.pop_back();
  const gc::Comparison c = gc::compare_reports(gc::json_report(base), "b", gc::json_report(now), "n");
  EXPECT_TRUE(c.regressed());
  EXPECT_EQ(c.new_incomplete, now.incomplete_reason);
  EXPECT_NE(gc::comparison_markdown(c).find("the new report is incomplete"), std::string::npos);
}

TEST(Compare, FiguresOfARunThatStoppedEarlyAreNotCompared) {
  gc::RunRecord base = two_passing();
  base.scenarios[0].status = gc::Status::error;
  base.scenarios[0].seconds = 0.001;
  const gc::RunRecord now = two_passing();
  const gc::Comparison c = gc::compare_reports(gc::json_report(base), "b", gc::json_report(now), "n");
  EXPECT_TRUE(c.regressions.empty()) << gc::comparison_markdown(c);
  EXPECT_EQ(c.fixed.size(), 1u);
}

// ---- --repeat ------------------------------------------------------------------------------

TEST(MergeRepeats, ACheckThatFailsInSomeRunsIsFlaky) {
  gc::ScenarioRecord bad = failing_record();
  gc::ScenarioRecord good = passing_record();
  const gc::ScenarioRecord merged = gc::merge_repeats({bad, good, bad});
  EXPECT_EQ(merged.repeats, 3);
  EXPECT_EQ(merged.status, gc::Status::failed);
  const auto flaky = std::find_if(merged.findings.begin(), merged.findings.end(),
                                  [](const gc::Finding& f) { return f.probe == "repeat" && f.subject == "layers.0.w|<scale>"; });
  ASSERT_NE(flaky, merged.findings.end());
  EXPECT_NE(flaky->message.find("failed in run(s) 1, 3 and held in run(s) 2 of 3"), std::string::npos) << flaky->message;
}

TEST(MergeRepeats, ARunThatCrashedIsNoEvidenceThatAChecksHeld) {
  gc::ScenarioRecord bad = failing_record();
  gc::ScenarioRecord crashed = failing_record();
  crashed.findings.clear();
  crashed.status = gc::Status::crashed;
  crashed.reason = "the scenario's process was killed by SIGSEGV";
  const gc::ScenarioRecord merged = gc::merge_repeats({bad, crashed});
  EXPECT_EQ(merged.status, gc::Status::crashed);  // the worst run's record
  EXPECT_EQ(merged.reason, crashed.reason);
  for (const auto& f : merged.findings) EXPECT_NE(f.subject, "layers.0.w|<scale>") << f.message;  // not "flaky"
  EXPECT_TRUE(std::any_of(merged.findings.begin(), merged.findings.end(),
                          [](const gc::Finding& f) { return f.probe == "repeat" && f.subject == "status"; }));
}

TEST(MergeRepeats, SameOutcomeEveryTimeIsNotFlaky) {
  const gc::ScenarioRecord merged = gc::merge_repeats({failing_record(), failing_record(), failing_record()});
  EXPECT_EQ(merged.findings.size(), failing_record().findings.size());
}

TEST(ReportViews, Utf8CleanReplacesWhatIsNotUtf8) {
  EXPECT_EQ(gc::report::utf8_clean("ok µs"), "ok µs");
  EXPECT_EQ(gc::report::utf8_clean("cut \xC2"), "cut \xEF\xBF\xBD");
  EXPECT_EQ(gc::report::utf8_clean("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(gc::report::utf8_clean("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(gc::report::utf8_clean("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
}
