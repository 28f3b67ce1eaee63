#include "report_views.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace graphcheck::report {
namespace {

bool observed(const Measurement& m) { return m.pass.empty() || m.pass == "observe"; }

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::vector<PhaseTime> phase_times(const ScenarioRecord& record) {
  std::vector<PhaseTime> out;
  const std::string prefix = "gc/timing/";
  for (const auto& m : record.measurements) {
    if (!observed(m) || !starts_with(m.tag, prefix) || !std::isfinite(m.value)) continue;
    const std::string phase = m.tag.substr(prefix.size());
    auto it = std::find_if(out.begin(), out.end(), [&](const PhaseTime& p) { return p.phase == phase; });
    if (it == out.end()) it = out.insert(out.end(), PhaseTime{phase, 0, 0});
    it->seconds += m.value;
    ++it->windows;
  }
  return out;
}

std::string MemoryPoint::label() const {
  std::string s = phase;
  if (batch_size > 0) s += fmt::format(" b={}", batch_size);
  s += cycle == 0 ? " (initial)" : fmt::format(" (refit {})", cycle);
  return s;
}

std::vector<MemoryPoint> memory_series(const ScenarioRecord& record) {
  // gc/memory/<phase>/live_bytes, then .../peak_bytes of the same window.
  std::vector<MemoryPoint> out;
  const std::string prefix = "gc/memory/";
  for (const auto& m : record.measurements) {
    if (!observed(m) || !starts_with(m.tag, prefix) || !std::isfinite(m.value)) continue;
    const std::string rest = m.tag.substr(prefix.size());
    const auto slash = rest.find('/');
    if (slash == std::string::npos) continue;
    const std::string phase = rest.substr(0, slash), what = rest.substr(slash + 1);
    if (what == "live_bytes") {
      out.push_back({phase, m.cycle, m.batch_size, m.value, m.value});
    } else if (what == "peak_bytes" && !out.empty() && out.back().phase == phase &&
               out.back().cycle == m.cycle && out.back().batch_size == m.batch_size) {
      out.back().peak_bytes = std::max(out.back().live_bytes, m.value);
    }
  }
  return out;
}

std::vector<SpanRow> span_rows(const ScenarioRecord& record) {
  std::vector<SpanRow> rows;
  std::vector<double> open_until;  // end times of the enclosing spans
  std::string pass;
  for (const auto& span : record.spans) {
    if (span.phase.empty() || span.pass != pass) {
      open_until.clear();
      pass = span.pass;
    }
    while (!open_until.empty() && span.start >= open_until.back() - 1e-12) open_until.pop_back();
    rows.push_back({&span, static_cast<int>(open_until.size())});
    open_until.push_back(span.start + span.seconds);
  }
  return rows;
}

const Span* span_of(const ScenarioRecord& record, const Finding& f) {
  const Span* pass_span = nullptr;
  for (const auto& s : record.spans) {
    if (s.pass != f.pass) continue;
    if (s.phase.empty()) {
      if (!pass_span) pass_span = &s;
      continue;
    }
    if (s.phase == f.phase && s.cycle == f.cycle && (f.batch_size == 0 || s.batch_size == f.batch_size)) return &s;
  }
  return pass_span;
}

bool unexpected(const RunRecord& run, const ScenarioRecord& r) {
  if (r.status == Status::passed || r.status == Status::skipped) return false;
  if (!run.kill_matrix || r.mutations.empty()) return true;
  if (r.status != Status::failed) return true;
  return std::any_of(r.verdicts.begin(), r.verdicts.end(), [](const MutationVerdict& v) { return !v.ok(); });
}

std::string utf8_clean(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xc0) == 0x80;
    if (ok && len > 1) {
      // No overlong forms, surrogates or code points past U+10FFFF.
      std::uint32_t cp = c & (0xff >> (len + 1));
      for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3f);
      const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min[len] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    }
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string markup_escape(const std::string& text) {
  const std::string s = utf8_clean(text);
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += (c < 0x20 && c != '\n' && c != '\t' && c != '\r') ? ' ' : static_cast<char>(c);
    }
  }
  return out;
}

std::string markdown_cell(const std::string& s, bool html) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '|': out += "\\|"; break;
      case '\n': out += ' '; break;
      case '\r': break;
      case '<': out += html ? "&lt;" : "<"; break;
      case '>': out += html ? "&gt;" : ">"; break;
      default: out += c;
    }
  }
  return out;
}

std::string format_seconds(double s) {
  if (!std::isfinite(s)) return "-";
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.0f} µs", s * 1e6);
}

std::string format_bytes(double b) {
  if (!std::isfinite(b)) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = b;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", v);
  const int digits = std::fabs(v) >= 100 ? 0 : std::fabs(v) >= 10 ? 1 : 2;
  return fmt::format("{:.{}f} {}", v, digits, units[u]);
}

std::string display_name(const ScenarioRecord& r) {
  if (r.mutations.empty()) return r.name;
  std::string s = r.name + " [";
  for (std::size_t i = 0; i < r.mutations.size(); ++i) s += (i ? ", " : "") + r.mutations[i];
  return s + "]";
}

std::string where(const Finding& f) {
  std::string s;
  if (!f.pass.empty()) s += f.pass + " pass, ";
  s += fmt::format("phase {}, ", f.phase);
  s += f.cycle == 0 ? "initial load" : fmt::format("refit cycle {}", f.cycle);
  if (f.batch_size > 0) s += fmt::format(", batch {}", f.batch_size);
  return s;
}

std::string cell_text(const std::string& cell) {
  if (starts_with(cell, "KILLED:")) return fmt::format("KILLED ({})", cell.substr(7));
  if (starts_with(cell, "failed:")) return fmt::format("({})", cell.substr(7));
  if (cell == ".") return "";
  return cell;
}

std::string status_badge(Status status) {
  switch (status) {
    case Status::passed: return "✅ passed";
    case Status::failed: return "❌ failed";
    case Status::error: return "⚠️ error";
    case Status::crashed: return "💥 crashed";
    case Status::skipped: return "⏭️ skipped";
  }
  return to_string(status);
}

std::string corroboration(const ScenarioRecord& record, const Cause& cause) {
  std::vector<std::pair<std::string, int>> counts;
  for (std::size_t k = 1; k < cause.findings.size(); ++k) {
    if (cause.findings[k] >= record.findings.size()) continue;
    const std::string& probe = record.findings[cause.findings[k]].probe;
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == probe; });
    if (it == counts.end()) {
      counts.emplace_back(probe, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [probe, n] : counts) parts.push_back(fmt::format("{} ×{}", probe, n));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string first_seen(const Cause& cause) {
  return cause.first_cycle == 0 ? std::string("at the initial load (cycle 0)") : fmt::format("in cycle {}", cause.first_cycle);
}

std::string causes_heading(const ScenarioRecord& record) {
  return fmt::format("{} cause{} ({} finding{})", record.causes.size(), record.causes.size() == 1 ? "" : "s",
                     record.findings.size(), record.findings.size() == 1 ? "" : "s");
}

}  // namespace graphcheck::report
