// One self-contained HTML page: inline CSS, inline SVG charts and a few lines of script for the
// status filters. Nothing is fetched, so it opens from a CI artifact store or a mail attachment.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "graphcheck/engine/reporter.h"
#include "report_views.h"

namespace graphcheck {
namespace {

std::string esc(const std::string& s) { return report::markup_escape(s); }

const char* phase_color(const std::string& phase) {
  static const std::map<std::string, const char*> colors = {
      {"construct", "#8c8c8c"}, {"load", "#4e79a7"},   {"pwal", "#f28e2b"},
      {"warmup", "#76b7b2"},    {"capture", "#e15759"}, {"replay", "#59a14f"},
      {"compare", "#edc948"},   {"refit", "#b07aa1"},  {"sleep", "#bab0ac"},
      {"wake", "#ff9da7"}};
  auto it = colors.find(phase);
  return it == colors.end() ? "#9c755f" : it->second;
}

constexpr const char* kStyle = R"css(
:root { --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --muted: #656d76; --line: #d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1f2328; background: #f6f8fa; }
header { background: #fff; border-bottom: 1px solid var(--line); padding: 16px 24px; position: sticky; top: 0; z-index: 1; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 24px 0 8px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
main { padding: 0 24px 48px; }
code, .mono { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
.muted { color: var(--muted); }
.env { color: var(--muted); font-size: 12px; }
.filters { margin-top: 8px; display: flex; gap: 14px; align-items: center; flex-wrap: wrap; }
.filters input[type=search] { padding: 3px 6px; border: 1px solid var(--line); border-radius: 4px; min-width: 220px; }
table { border-collapse: collapse; background: #fff; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 12px; font-weight: 600; color: #fff; }
.badge.passed { background: var(--ok); } .badge.failed { background: var(--bad); }
.badge.error { background: var(--warn); } .badge.crashed { background: #6e40c9; } .badge.skipped { background: var(--muted); }
details.scenario { background: #fff; border: 1px solid var(--line); border-radius: 6px; margin: 8px 0; }
details.scenario > summary { cursor: pointer; padding: 8px 12px; }
details.scenario > .body { padding: 0 12px 12px; border-top: 1px solid var(--line); }
.reason { border-left: 3px solid var(--warn); padding: 4px 8px; background: #fff8c5; }
pre.mono { white-space: pre-wrap; background: #f6f8fa; border: 1px solid var(--line); padding: 6px; max-height: 320px; overflow: auto; }
.cause { border: 1px solid var(--bad); border-radius: 6px; padding: 6px 10px; margin: 8px 0; background: #fff; }
.cause > .summary { font-weight: 600; }
.cause > .where, details.all-findings > summary { color: var(--muted); font-size: 12px; }
details.all-findings > summary { cursor: pointer; margin-top: 8px; }
.finding { border-left: 3px solid var(--bad); padding: 4px 10px; margin: 8px 0; background: #fff5f5; }
.finding .where { color: var(--muted); font-size: 12px; }
.finding details.evidence { margin-top: 2px; }
.finding details.evidence > summary { cursor: pointer; color: var(--muted); font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; margin-top: 8px; }
.chart { background: #fff; border: 1px solid var(--line); border-radius: 4px; padding: 6px; }
.chart h4 { margin: 0 0 2px; font-size: 12px; }
svg text { font: 10px system-ui, sans-serif; fill: #1f2328; }
svg .axis { stroke: #8c959f; stroke-width: 1; }
svg .grid { stroke: #eaeef2; stroke-width: 1; }
.km td, .km th { white-space: nowrap; }
.km td.killed { background: #dafbe1; } .km td.missed { background: #ffebe9; font-weight: 700; }
.km td.undeclared { background: #fff8c5; } .km td.verdict-bad { color: var(--bad); font-weight: 600; }
.verdict.ok { color: var(--ok); } .verdict.bad { color: var(--bad); font-weight: 600; }
)css";

constexpr const char* kScript = R"js(
(function () {
  var boxes = Array.prototype.slice.call(document.querySelectorAll('.filters input[data-filter]'));
  var search = document.getElementById('search');
  var onlyBad = document.getElementById('km-only-bad');
  function apply() {
    var show = {};
    boxes.forEach(function (b) { show[b.getAttribute('data-filter')] = b.checked; });
    var q = (search.value || '').toLowerCase();
    document.querySelectorAll('[data-status][data-name]').forEach(function (el) {
      var name = el.getAttribute('data-name').toLowerCase();
      el.hidden = show[el.getAttribute('data-status')] === false || (q !== '' && name.indexOf(q) < 0);
    });
    document.querySelectorAll('tr[data-km]').forEach(function (tr) {
      tr.hidden = onlyBad !== null && onlyBad.checked && tr.getAttribute('data-km') === 'ok';
    });
  }
  boxes.forEach(function (b) { b.addEventListener('change', apply); });
  search.addEventListener('input', apply);
  if (onlyBad !== null) onlyBad.addEventListener('change', apply);
  apply();
})();
)js";

// ---- charts ---------------------------------------------------------------------------------

struct Frame {
  double width, height, left, right, top, bottom;
  [[nodiscard]] double plot_w() const { return width - left - right; }
  [[nodiscard]] double plot_h() const { return height - top - bottom; }
};

// A "nice" axis maximum and step (1, 2, 5 x 10^k) for `ticks` intervals.
std::pair<double, double> nice_axis(double max, int ticks, double base) {
  if (!(max > 1e-12) || !std::isfinite(max)) return {1, 1.0 / ticks};
  const double raw = max / ticks;
  double mag = std::pow(base, std::floor(std::log(raw) / std::log(base)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) {
      mag *= m;
      break;
    }
  }
  return {mag * ticks, mag};
}

std::string memory_chart(const ScenarioRecord& r) {
  const auto points = report::memory_series(r);
  if (points.empty()) {
    return "<p class=\"muted\">No memory chart: the memory probe did not run in this scenario.</p>";
  }
  const Frame f{640, 230, 74, 12, 26, 46};
  double max = 0;
  for (const auto& p : points) max = std::max({max, p.live_bytes, p.peak_bytes});
  const auto [top, step] = nice_axis(max * 1.05, 4, 2);  // powers of two suit bytes
  const double n = static_cast<double>(points.size());
  auto x = [&](std::size_t i) { return f.left + (static_cast<double>(i) + 0.5) * f.plot_w() / n; };
  auto y = [&](double v) { return f.top + f.plot_h() * (1 - v / top); };
  std::string svg = fmt::format(
      "<svg class=\"memory-chart\" role=\"img\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "xmlns=\"http://www.w3.org/2000/svg\"><title>live and peak bytes after each phase window of "
      "the observe pass</title>",
      f.width, f.height);
  // Refit-cycle bands.
  std::size_t begin = 0;
  for (std::size_t i = 1; i <= points.size(); ++i) {
    if (i < points.size() && points[i].cycle == points[begin].cycle) continue;
    const double x0 = f.left + static_cast<double>(begin) * f.plot_w() / n;
    const double x1 = f.left + static_cast<double>(i) * f.plot_w() / n;
    if (points[begin].cycle % 2 == 1) {
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#f3f0ff\"/>", x0,
                         f.top, x1 - x0, f.plot_h());
    }
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", (x0 + x1) / 2,
                       f.height - f.bottom + 14,
                       points[begin].cycle == 0 ? std::string("initial") : fmt::format("refit {}", points[begin].cycle));
    begin = i;
  }
  for (double v = 0; v <= top + step / 2; v += step) {
    svg += fmt::format("<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>", f.left,
                       f.width - f.right, y(v), y(v));
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", f.left - 4, y(v) + 3,
                       esc(report::format_bytes(v)));
  }
  svg += fmt::format("<line class=\"axis\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>", f.left, f.top,
                     f.height - f.bottom);
  svg += fmt::format("<line class=\"axis\" x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\"/>", f.left,
                     f.width - f.right, f.height - f.bottom);
  std::string live, peak;
  for (std::size_t i = 0; i < points.size(); ++i) {
    live += fmt::format("{:.1f},{:.1f} ", x(i), y(points[i].live_bytes));
    peak += fmt::format("{:.1f},{:.1f} ", x(i), y(points[i].peak_bytes));
  }
  svg += fmt::format("<polyline class=\"peak\" fill=\"none\" stroke=\"#f28e2b\" stroke-width=\"1.5\" "
                     "stroke-dasharray=\"4 3\" points=\"{}\"/>",
                     peak);
  svg += fmt::format("<polyline class=\"live\" fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"2\" points=\"{}\"/>", live);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}: live {}, peak {}</title></circle>",
                       x(i), y(p.live_bytes), phase_color(p.phase), esc(p.label()),
                       esc(report::format_bytes(p.live_bytes)), esc(report::format_bytes(p.peak_bytes)));
  }
  svg += fmt::format("<text x=\"{}\" y=\"14\">— live bytes</text>", f.left);
  svg += fmt::format("<text x=\"{}\" y=\"14\" fill=\"#f28e2b\">- - peak within the phase</text>", f.left + 90);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"muted\">{} phase windows; hover a point for its phase</text>",
                     f.left, f.height - 8, points.size());
  return svg + "</svg>";
}

std::string timeline_chart(const ScenarioRecord& r) {
  const auto rows = report::span_rows(r);
  if (rows.empty()) return "<p class=\"muted\">No timeline: no pass ran.</p>";
  std::vector<std::string> passes;
  double end = 0;
  for (const auto& row : rows) {
    if (std::find(passes.begin(), passes.end(), row.span->pass) == passes.end()) passes.push_back(row.span->pass);
    end = std::max(end, row.span->start + row.span->seconds);
  }
  const double lane = 20;
  const Frame f{640, 0, 86, 34, 8, 40};
  const double height = f.top + lane * static_cast<double>(passes.size()) + f.bottom;
  const auto [axis_end, step] = nice_axis(end, 5, 10);
  auto x = [&](double s) { return f.left + f.plot_w() * s / axis_end; };
  std::string svg = fmt::format(
      "<svg class=\"timeline-chart\" role=\"img\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "xmlns=\"http://www.w3.org/2000/svg\"><title>wall-clock timeline: a lane per pass, its phase "
      "windows nested</title>",
      f.width, height);
  for (double v = 0; v <= axis_end + step / 2; v += step) {
    svg += fmt::format("<line class=\"grid\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\"/>", x(v), f.top,
                       height - f.bottom);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", x(v),
                       height - f.bottom + 12, esc(report::format_seconds(v)));
  }
  for (std::size_t i = 0; i < passes.size(); ++i) {
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", f.left - 4,
                       f.top + lane * static_cast<double>(i) + 13, esc(passes[i]));
  }
  std::vector<std::string> legend;
  for (const auto& row : rows) {
    const Span& s = *row.span;
    const auto lane_index = std::find(passes.begin(), passes.end(), s.pass) - passes.begin();
    const double inset = std::min(row.depth, 3) * 2.5;
    const double y0 = f.top + lane * static_cast<double>(lane_index) + 2 + inset;
    const double h = std::max(4.0, 16 - 2 * inset);
    const char* fill = s.phase.empty() ? "#eaeef2" : phase_color(s.phase);
    if (!s.phase.empty() && std::find(legend.begin(), legend.end(), s.phase) == legend.end()) legend.push_back(s.phase);
    std::string what = s.phase.empty() ? s.pass + " pass" : fmt::format("{} ({} pass", s.phase, s.pass);
    if (!s.phase.empty()) {
      what += s.cycle == 0 ? ", initial" : fmt::format(", refit {}", s.cycle);
      if (s.batch_size > 0) what += fmt::format(", batch {}", s.batch_size);
      what += ")";
    }
    svg += fmt::format("<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\"><title>{}: {} "
                       "from {}</title></rect>",
                       x(s.start), y0, std::max(0.5, x(s.start + s.seconds) - x(s.start)), h, fill, esc(what),
                       esc(report::format_seconds(s.seconds)), esc(report::format_seconds(s.start)));
  }
  double lx = f.left;
  for (const auto& phase : legend) {
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"9\" height=\"9\" fill=\"{}\"/>", lx, height - 18,
                       phase_color(phase));
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>", lx + 12, height - 10, esc(phase));
    lx += 16 + 6.5 * static_cast<double>(phase.size()) + 8;
  }
  return svg + "</svg>";
}

std::string phase_chart(const ScenarioRecord& r) {
  const auto times = report::phase_times(r);
  if (times.empty()) return "<p class=\"muted\">No phase timings (the observe pass did not run).</p>";
  double max = 0;
  for (const auto& t : times) max = std::max(max, t.seconds);
  const double bar = 16;
  const Frame f{420, 0, 74, 90, 6, 6};
  const double height = f.top + bar * static_cast<double>(times.size()) + f.bottom;
  std::string svg = fmt::format(
      "<svg class=\"phase-chart\" role=\"img\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "xmlns=\"http://www.w3.org/2000/svg\"><title>model time per phase in the observe pass, summed "
      "over cycles and batch sizes</title>",
      f.width, height);
  for (std::size_t i = 0; i < times.size(); ++i) {
    const auto& t = times[i];
    const double y0 = f.top + bar * static_cast<double>(i);
    const double w = max > 0 ? f.plot_w() * t.seconds / max : 0;
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", f.left - 4, y0 + 11, esc(t.phase));
    svg += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>{}: {} in {} "
                       "windows</title></rect>",
                       f.left, y0 + 2, std::max(0.5, w), bar - 4, phase_color(t.phase), esc(t.phase),
                       esc(report::format_seconds(t.seconds)), t.windows);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{} ({}×)</text>", f.left + std::max(0.5, w) + 4, y0 + 11,
                       esc(report::format_seconds(t.seconds)), t.windows);
  }
  return svg + "</svg>";
}

// ---- page parts -----------------------------------------------------------------------------

std::string badge(Status s) { return fmt::format("<span class=\"badge {0}\">{0}</span>", to_string(s)); }

std::string finding_html(const Finding& f, bool open) {
  std::string h = "<div class=\"finding\">";
  h += fmt::format("<div><b>[{}]</b> <code>{}</code> <span class=\"where\">{}</span></div>", esc(f.probe),
                   esc(f.subject), esc(report::where(f)));
  h += fmt::format("<div>{}</div>", esc(f.message));
  if (!f.evidence.empty()) {
    h += fmt::format("<details class=\"evidence\"{}><summary>evidence ({})</summary><table>", open ? " open" : "",
                     f.evidence.size());
    for (const auto& [k, v] : f.evidence) h += fmt::format("<tr><th>{}</th><td><code>{}</code></td></tr>", esc(k), esc(v));
    h += "</table></details>";
  }
  return h + "</div>";
}

std::string scenario_html(const ScenarioRecord& r, std::size_t index, bool open) {
  std::string h = fmt::format(
      "<details class=\"scenario\" id=\"s{}\" data-status=\"{}\" data-name=\"{}\"{}><summary>{} <b>{}</b> "
      "<span class=\"muted\">{} · {} · {}{}</span></summary><div class=\"body\">",
      index, to_string(r.status), esc(report::display_name(r)), open ? " open" : "",
      badge(r.status), esc(report::display_name(r)), esc(r.fixture), r.backend.empty() ? "-" : esc(r.backend),
      esc(report::format_seconds(r.seconds)),
      r.findings.empty() ? "" : fmt::format(" · {} finding{}", r.findings.size(), r.findings.size() == 1 ? "" : "s"));
  h += fmt::format("<p class=\"muted\">file <code>{}</code>{}{}</p>", esc(r.file),
                   r.backend_reason.empty() ? "" : fmt::format(" · backend {} ({})", esc(r.backend), esc(r.backend_reason)),
                   r.passes.empty() ? "" : fmt::format(" · passes {}", esc(fmt::format("{}", fmt::join(r.passes, ", ")))));
  if (!r.description.empty()) h += fmt::format("<p>{}</p>", esc(r.description));
  if (!r.reason.empty()) h += fmt::format("<p class=\"reason\">{}</p>", esc(r.reason));
  if (r.crash && !r.crash->stderr_tail.empty()) {
    h += fmt::format("<details class=\"crash\" open><summary>the end of its output</summary><pre class=\"mono\">{}</pre>"
                     "</details>",
                     esc(r.crash->stderr_tail));
  }
  // Causes first (Note [Triage]), each with its primary finding.
  if (!r.causes.empty()) {
    h += fmt::format("<h3>{}</h3>", esc(report::causes_heading(r)));
    for (std::size_t k = 0; k < r.causes.size(); ++k) {
      const Cause& c = r.causes[k];
      h += fmt::format("<div class=\"cause\"><div class=\"summary\"><b>{}.</b> {}</div>", k + 1, esc(c.summary));
      h += fmt::format("<div class=\"where\">first seen {} · rerun: <code>{}</code></div>", report::first_seen(c),
                       esc(c.repro));
      if (!c.findings.empty() && c.findings.front() < r.findings.size()) {
        h += finding_html(r.findings[c.findings.front()], true);
      }
      if (const std::string more = report::corroboration(r, c); !more.empty()) {
        h += fmt::format("<div class=\"where\">and {} corroborating finding{}: {}</div>", c.findings.size() - 1,
                         c.findings.size() == 2 ? "" : "s", esc(more));
      }
      h += "</div>";
    }
  }
  if (!r.verdicts.empty()) {
    h += "<ul class=\"verdicts\">";
    for (const auto& v : r.verdicts) {
      h += fmt::format("<li class=\"verdict {}\">{}</li>", v.ok() ? "ok" : "bad", esc(verdict_line(r, v)));
    }
    h += "</ul>";
  }
  if (r.crash) {
    // Its measurements died with its process: no chart to draw.
    h += "<p class=\"muted\">No charts: the scenario's process ended before it could report its measurements.</p>";
  } else {
    h += "<div class=\"charts\">";
    h += fmt::format("<div class=\"chart\"><h4>Memory across phases and refit cycles</h4>{}</div>", memory_chart(r));
    h += fmt::format("<div class=\"chart\"><h4>Timeline</h4>{}</div>", timeline_chart(r));
    h += fmt::format("<div class=\"chart\"><h4>Model time per phase</h4>{}</div>", phase_chart(r));
    h += "</div>";
  }
  // Every finding: behind a toggle when the causes above lead; else the first few open.
  if (!r.findings.empty()) {
    const bool triaged = !r.causes.empty();
    h += triaged ? fmt::format("<details class=\"all-findings\"><summary>All findings ({})</summary>", r.findings.size())
                 : fmt::format("<h3>Findings ({})</h3>", r.findings.size());
    for (std::size_t i = 0; i < r.findings.size(); ++i) h += finding_html(r.findings[i], !triaged && i < 3);
    if (triaged) h += "</details>";
  }
  h += "</div></details>\n";
  return h;
}

std::string kill_matrix_html(const KillMatrix& m) {
  const auto bad = std::count_if(m.rows.begin(), m.rows.end(), [](const auto& r) { return !r.ok(); });
  std::string h = fmt::format(
      "<section id=\"kill-matrix\"><h2>Kill matrix: {} rows, {} not ok</h2><p class=\"muted\">A cell names the "
      "pass whose finding killed the mutation; (pass): caught by a probe the scenario does not declare; MISSED: "
      "a declared probe did not catch it. <label><input type=\"checkbox\" id=\"km-only-bad\"> only rows not "
      "ok</label></p><table class=\"km\"><tr><th>scenario</th><th>mutation</th>",
      m.rows.size(), bad);
  for (const auto& p : m.probes) h += fmt::format("<th>{}</th>", esc(p));
  h += "<th>verdict</th></tr>";
  for (const auto& row : m.rows) {
    h += fmt::format("<tr data-km=\"{}\"><td>{}</td><td><code>{}</code></td>", row.ok() ? "ok" : "bad",
                     esc(row.scenario), esc(row.mutation.empty() ? "(clean)" : row.mutation));
    for (const auto& p : m.probes) {
      auto it = row.cells.find(p);
      const std::string cell = it == row.cells.end() ? "." : it->second;
      const char* cls = cell.rfind("KILLED:", 0) == 0 ? "killed"
                        : cell == "MISSED"            ? "missed"
                        : cell.rfind("failed:", 0) == 0 ? "undeclared"
                                                        : "";
      h += fmt::format("<td class=\"{}\">{}</td>", cls, esc(report::cell_text(cell)));
    }
    h += fmt::format("<td class=\"{}\">{}</td></tr>", row.ok() ? "" : "verdict-bad", esc(row.verdict));
  }
  h += "</table>";
  if (!m.problems.empty()) {
    h += "<h3>Problems</h3><ul>";
    for (const auto& p : m.problems) h += fmt::format("<li>{}</li>", esc(p));
    h += "</ul>";
  }
  return h + "</section>\n";
}

}  // namespace

std::string html_report(const RunRecord& run) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  h += fmt::format("<title>graphcheck{}: {} scenarios, {} not passed</title>", run.kill_matrix ? " mutants" : "",
                   run.scenarios.size(),
                   run.count(Status::failed) + run.count(Status::error) + run.count(Status::crashed));
  h += fmt::format("<style>{}</style></head><body>\n<header>", kStyle);
  h += fmt::format("<h1>graphcheck{} report</h1>", run.kill_matrix ? " mutants" : "");
  if (run.kill_matrix) {
    const auto& m = *run.kill_matrix;
    h += fmt::format("<div class=\"verdict {}\"><b>{}</b></div>", m.problems.empty() ? "ok" : "bad",
                     m.problems.empty() ? std::string("Every declared probe caught its mutation.")
                                        : fmt::format("{} problems in the kill matrix.", m.problems.size()));
  }
  h += fmt::format("<div>{} scenarios: {} passed, {} failed, {} errors, {} crashed, {} skipped, in {}</div>",
                   run.scenarios.size(), run.count(Status::passed), run.count(Status::failed),
                   run.count(Status::error), run.count(Status::crashed), run.count(Status::skipped),
                   esc(report::format_seconds(run.seconds)));
  if (!run.complete) {
    h += fmt::format("<div class=\"reason incomplete\"><b>Incomplete run:</b> {}</div>",
                     run.incomplete_reason.empty() ? std::string("it is still going, or it ended before it could say so")
                                                   : esc(run.incomplete_reason));
  }
  std::vector<std::string> env;
  for (const auto& [k, v] : run.environment) env.push_back(fmt::format("{} <code>{}</code>", esc(k), esc(v)));
  env.push_back(fmt::format("threads {}", run.threads));
  if (run.isolated) env.push_back(fmt::format("isolated, -j {}", run.jobs));
  if (run.total_shards > 1) env.push_back(fmt::format("shard {} of {}", run.shard_index, run.total_shards));
  env.push_back(fmt::format("started {}", esc(run.started_at)));
  h += fmt::format("<div class=\"env\">{}</div>", fmt::join(env, " · "));
  h += "<div class=\"filters\"><b>Show</b>";
  for (Status s : {Status::failed, Status::error, Status::crashed, Status::passed, Status::skipped}) {
    h += fmt::format("<label><input type=\"checkbox\" data-filter=\"{0}\" checked> {1} ({2})</label>", to_string(s),
                     badge(s), run.count(s));
  }
  h += "<input type=\"search\" id=\"search\" placeholder=\"filter by scenario or mutation\"></div></header>\n<main>";

  if (run.kill_matrix) h += kill_matrix_html(*run.kill_matrix);
  h += "<h2>Scenarios</h2><table class=\"overview\"><tr><th>status</th><th>scenario</th><th>fixture</th>"
       "<th>backend</th><th>findings</th><th>failed probes</th><th>time</th></tr>";
  for (std::size_t i = 0; i < run.scenarios.size(); ++i) {
    const auto& r = run.scenarios[i];
    h += fmt::format("<tr data-status=\"{}\" data-name=\"{}\"><td>{}</td><td><a href=\"#s{}\">{}</a></td><td>{}</td>"
                     "<td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
                     to_string(r.status), esc(report::display_name(r)), badge(r.status), i,
                     esc(report::display_name(r)), esc(r.fixture), esc(r.backend), r.findings.size(),
                     esc(fmt::format("{}", fmt::join(r.failed_probes(), ", "))),
                     esc(report::format_seconds(r.seconds)));
  }
  h += "</table>\n";
  h += run.kill_matrix ? "<h2>Details</h2><p class=\"muted\">A mutated run is meant to fail; only clean runs that "
                         "do not pass and mutations a declared probe missed are open.</p>\n"
                       : "<h2>Details</h2>\n";
  for (std::size_t i = 0; i < run.scenarios.size(); ++i) {
    h += scenario_html(run.scenarios[i], i, report::unexpected(run, run.scenarios[i]));
  }
  h += fmt::format("</main><script>{}</script></body></html>\n", kScript);
  return h;
}

HtmlReporter::HtmlReporter(std::string path) : FileReporter(std::move(path), &html_report) {}

}  // namespace graphcheck
