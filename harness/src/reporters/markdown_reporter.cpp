// GitHub-flavoured Markdown: what a reviewer reads in a PR comment or a CI job summary.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "graphcheck/engine/reporter.h"
#include "report_views.h"

namespace graphcheck {
namespace {

std::string cell(const std::string& s) { return report::markdown_cell(s); }

// Inline code that survives backticks in the text.
std::string code(const std::string& s) {
  const std::string fence = s.find('`') == std::string::npos ? "`" : "`` ";
  const std::string close = fence == "`" ? "`" : " ``";
  return fence + report::markdown_cell(s, false) + close;
}

// Running text: keep it on its lines, defuse HTML.
std::string text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

// Running text whose `spans` are code (a cause's summary): each part as what it is.
std::string text_with_code(const std::string& s) {
  std::string out;
  std::size_t at = 0;
  bool in_code = false;
  while (at <= s.size()) {
    const std::size_t tick = s.find('`', at);
    const std::string part = s.substr(at, tick == std::string::npos ? std::string::npos : tick - at);
    if (in_code) {
      out += code(part);
    } else {
      out += text(part);
    }
    if (tick == std::string::npos) break;
    in_code = !in_code;
    at = tick + 1;
  }
  return out;
}

void kill_matrix(std::string& md, const KillMatrix& m) {
  const auto bad = std::count_if(m.rows.begin(), m.rows.end(), [](const auto& r) { return !r.ok(); });
  md += fmt::format("\n### Kill matrix: {} rows, {} not ok\n\n", m.rows.size(), bad);
  md += "A cell names the pass whose finding killed the mutation; (pass): caught by a probe the "
        "scenario does not declare; MISSED: a declared probe did not catch it.\n\n";
  md += "| scenario | mutation |";
  for (const auto& p : m.probes) md += fmt::format(" {} |", cell(p));
  md += " verdict |\n|---|---|";
  for (std::size_t i = 0; i < m.probes.size(); ++i) md += "---|";
  md += "---|\n";
  for (const auto& row : m.rows) {
    md += fmt::format("| {} | {} |", cell(row.scenario), row.mutation.empty() ? "(clean)" : code(row.mutation));
    for (const auto& p : m.probes) {
      auto it = row.cells.find(p);
      const std::string c = report::cell_text(it == row.cells.end() ? "." : it->second);
      md += fmt::format(" {} |", c == "MISSED" ? "**MISSED**" : cell(c));
    }
    md += fmt::format(" {} |\n", row.ok() ? "ok" : "**" + cell(row.verdict) + "**");
  }
  if (!m.problems.empty()) {
    md += "\nProblems:\n\n";
    for (const auto& p : m.problems) md += fmt::format("- {}\n", text(p));
  }
}

// A scenario's failure section: its causes, each with its primary finding and evidence.
void failure_section(std::string& md, const ScenarioRecord& r) {
  md += fmt::format("\n#### {} {}\n\n", report::status_badge(r.status), text(report::display_name(r)));
  md += fmt::format("{} · fixture {} · backend {}\n\n", code(r.file), code(r.fixture),
                    r.backend.empty() ? "-" : code(r.backend));
  if (!r.reason.empty()) md += fmt::format("> {}\n\n", text(r.reason));
  if (r.crash && !r.crash->stderr_tail.empty()) {
    md += "<details><summary>the end of its output</summary>\n\n```\n";
    std::string tail = r.crash->stderr_tail;
    for (std::size_t at = 0; (at = tail.find("```", at)) != std::string::npos;) tail.replace(at, 3, "'''");
    md += tail + "\n```\n\n</details>\n\n";
  }
  const auto finding = [&](const Finding& f, const char* bullet, const char* indent) {
    md += fmt::format("{}**[{}]** {} ({})  \n{}{}\n", bullet, text(f.probe), code(f.subject), report::where(f), indent,
                      text(f.message));
    if (!f.evidence.empty()) {
      md += fmt::format("{}<details><summary>evidence</summary>\n\n", indent);
      md += fmt::format("{}| key | value |\n{}|---|---|\n", indent, indent);
      for (const auto& [k, v] : f.evidence) md += fmt::format("{}| {} | {} |\n", indent, cell(k), code(v));
      md += fmt::format("\n{}</details>\n", indent);
    }
  };
  // Causes first (Note [Triage]), each with its primary finding; the corroborating ones are
  // counted (the JSON and HTML reports list them all).
  if (!r.causes.empty()) {
    md += fmt::format("**{}**:\n\n", report::causes_heading(r));
    for (std::size_t k = 0; k < r.causes.size(); ++k) {
      const Cause& c = r.causes[k];
      md += fmt::format("{}. {}  \n   first seen {} · rerun: {}\n\n", k + 1, text_with_code(c.summary), report::first_seen(c),
                        code(c.repro));
      if (!c.findings.empty() && c.findings.front() < r.findings.size()) {
        finding(r.findings[c.findings.front()], "   ", "   ");
      }
      if (const std::string more = report::corroboration(r, c); !more.empty()) {
        md += fmt::format("\n   and {} corroborating finding{}: {}\n", c.findings.size() - 1,
                          c.findings.size() == 2 ? "" : "s", text(more));
      }
      md += "\n";
    }
    return;
  }
  // No triage (a record from an older report): the first findings, and a count of the rest.
  constexpr std::size_t kShown = 5;
  for (std::size_t i = 0; i < r.findings.size(); ++i) {
    if (i == kShown) {
      md += fmt::format("- … and {} more findings ({}; the JSON and HTML reports list them all)\n",
                        r.findings.size() - kShown, fmt::join(r.failed_probes(), ", "));
      break;
    }
    finding(r.findings[i], "- ", "  ");
  }
}

}  // namespace

std::string markdown_report(const RunRecord& run) {
  // A PR comment holds at most 65536 characters: failure sections stop at this budget.
  constexpr std::size_t kBudget = 50000;
  std::string md;
  const int not_ok = run.count(Status::failed) + run.count(Status::error) + run.count(Status::crashed);
  if (run.kill_matrix) {
    const auto& m = *run.kill_matrix;
    md += fmt::format("## graphcheck mutants: {}\n\n", m.problems.empty()
                                                           ? std::string("every declared probe caught its mutation")
                                                           : fmt::format("{} problems", m.problems.size()));
    md += fmt::format("{} runs (each scenario clean and with every mutation it declares) in {}.\n\n",
                      run.scenarios.size(), report::format_seconds(run.seconds));
  } else {
    md += fmt::format("## graphcheck: {}\n\n",
                      not_ok == 0 ? "all checks held" : fmt::format("{} of {} not passed", not_ok, run.scenarios.size()));
    md += fmt::format("{} scenarios: {} passed, {} failed, {} errors, {} crashed, {} skipped, in {}.\n\n",
                      run.scenarios.size(), run.count(Status::passed), run.count(Status::failed),
                      run.count(Status::error), run.count(Status::crashed), run.count(Status::skipped),
                      report::format_seconds(run.seconds));
  }
  if (!run.complete) {
    md += fmt::format("> ⚠️ **Incomplete run**: {}\n\n",
                      run.incomplete_reason.empty() ? std::string("it is still going, or it ended before it could say so")
                                                    : text(run.incomplete_reason));
  }
  std::vector<std::string> env;
  for (const auto& [k, v] : run.environment) env.push_back(fmt::format("{} {}", k, code(v)));
  env.push_back(fmt::format("threads {}", run.threads));
  if (run.isolated) env.push_back(fmt::format("isolated, -j {}", run.jobs));
  if (run.total_shards > 1) env.push_back(fmt::format("shard {} of {}", run.shard_index, run.total_shards));
  env.push_back(fmt::format("started {}", run.started_at));
  md += fmt::format("{}\n", fmt::join(env, " · "));

  if (run.kill_matrix) {
    kill_matrix(md, *run.kill_matrix);
  } else {
    md += "\n| status | scenario | fixture | backend | passes | findings | time |\n";
    md += "|---|---|---|---|---|---|---|\n";
    for (const auto& r : run.scenarios) {
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", report::status_badge(r.status),
                        cell(report::display_name(r)), cell(r.fixture), cell(r.backend), r.passes.size(),
                        r.findings.size(), report::format_seconds(r.seconds));
    }
  }

  // Warnings once per scenario (a kill matrix holds a record per mutation of each scenario).
  std::set<std::string> warned;
  for (const auto& r : run.scenarios) {
    if (r.warnings.empty() || !warned.insert(r.name).second) continue;
    if (warned.size() == 1) md += "\n### Warnings\n\n";
    for (const auto& w : r.warnings) md += fmt::format("- {}: {}\n", code(r.name), text(w));
  }

  std::vector<const ScenarioRecord*> shown;
  for (const auto& r : run.scenarios) {
    if (report::unexpected(run, r)) shown.push_back(&r);
  }
  if (!shown.empty()) md += run.kill_matrix ? "\n### Unexpected results\n" : "\n### Failures\n";
  for (std::size_t i = 0; i < shown.size(); ++i) {
    if (md.size() > kBudget) {
      md += fmt::format("\n… {} more not shown here (the JSON and HTML reports have every one).\n", shown.size() - i);
      break;
    }
    failure_section(md, *shown[i]);
  }

  if (!run.kill_matrix) {
    bool verdicts = false;
    for (const auto& r : run.scenarios) {
      for (const auto& v : r.verdicts) {
        if (!verdicts) {
          md += "\n### Mutation verdicts\n\n";
          verdicts = true;
        }
        md += fmt::format("- {} {}\n", v.ok() ? "✅" : "❌", text(verdict_line(r, v)));
      }
    }
  }
  return md;
}

MarkdownReporter::MarkdownReporter(std::string path) : FileReporter(std::move(path), &markdown_report) {}

}  // namespace graphcheck
