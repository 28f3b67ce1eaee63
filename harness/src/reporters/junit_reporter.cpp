#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "graphcheck/engine/reporter.h"
#include "report_views.h"

namespace graphcheck {
namespace {

std::string xml_escape(const std::string& s) { return report::markup_escape(s); }

}  // namespace

std::string junit_report(const RunRecord& run) {
  std::map<std::string, std::vector<const ScenarioRecord*>> by_file;
  for (const auto& r : run.scenarios) by_file[r.file].push_back(&r);

  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  if (run.kill_matrix) {
    // graphcheck mutants: one test case per kill-matrix row (a mutated run that fails is what
    // the matrix wants; a declared probe that misses is the failure).
    const KillMatrix& m = *run.kill_matrix;
    const auto bad = std::count_if(m.rows.begin(), m.rows.end(), [](const auto& r) { return !r.ok(); });
    xml += fmt::format("<testsuites name=\"graphcheck mutants\" tests=\"{}\" failures=\"{}\" time=\"{:.3f}\">\n",
                       m.rows.size(), bad, run.seconds);
    xml += fmt::format("  <testsuite name=\"kill matrix\" tests=\"{}\" failures=\"{}\">\n", m.rows.size(), bad);
    for (const auto& row : m.rows) {
      std::vector<std::string> cells;
      for (const auto& p : m.probes) {
        auto it = row.cells.find(p);
        if (it != row.cells.end() && it->second != ".") cells.push_back(p + "=" + it->second);
      }
      xml += fmt::format("    <testcase classname=\"graphcheck.mutants.{}\" name=\"{}\">\n",
                         xml_escape(row.scenario), xml_escape(row.mutation.empty() ? "(clean)" : row.mutation));
      xml += fmt::format("      <properties><property name=\"cells\" value=\"{}\"/></properties>\n",
                         xml_escape(fmt::format("{}", fmt::join(cells, " "))));
      if (!row.ok()) {
        xml += fmt::format("      <failure message=\"{}\" type=\"kill matrix\">{}</failure>\n",
                           xml_escape(row.verdict), xml_escape(row.verdict));
      }
      xml += "    </testcase>\n";
    }
    if (!m.problems.empty()) {
      std::string all;
      for (const auto& p : m.problems) all += p + "\n";
      xml += fmt::format("    <system-err>{}</system-err>\n", xml_escape(all));
    }
    xml += "  </testsuite>\n</testsuites>\n";
    return xml;
  }
  xml += fmt::format(
      "<testsuites name=\"graphcheck\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n",
      run.scenarios.size(), run.count(Status::failed),
      run.count(Status::error) + run.count(Status::crashed), run.count(Status::skipped), run.seconds);
  for (const auto& [file, records] : by_file) {
    int failures = 0, errors = 0, skipped = 0;
    double seconds = 0;
    for (const auto* r : records) {
      failures += r->status == Status::failed;
      errors += r->status == Status::error || r->status == Status::crashed;
      skipped += r->status == Status::skipped;
      seconds += r->seconds;
    }
    xml += fmt::format(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
        "time=\"{:.3f}\">\n",
        xml_escape(file), records.size(), failures, errors, skipped, seconds);
    for (const auto* r : records) {
      std::string name = r->name;
      if (!r->mutations.empty()) name += " [" + fmt::format("{}", fmt::join(r->mutations, ",")) + "]";
      xml += fmt::format("    <testcase classname=\"graphcheck.{}\" name=\"{}\" time=\"{:.3f}\"",
                         xml_escape(r->fixture), xml_escape(name), r->seconds);
      xml += ">\n";
      // Which backend ran and why, and the passes: every report says so.
      xml += "      <properties>\n";
      xml += fmt::format("        <property name=\"backend\" value=\"{}\"/>\n", xml_escape(r->backend));
      xml += fmt::format("        <property name=\"backend_reason\" value=\"{}\"/>\n",
                         xml_escape(r->backend_reason));
      xml += fmt::format("        <property name=\"passes\" value=\"{}\"/>\n",
                         xml_escape(fmt::format("{}", fmt::join(r->passes, ","))));
      for (const auto& v : r->verdicts) {
        xml += fmt::format("        <property name=\"mutation_verdict\" value=\"{}\"/>\n",
                           xml_escape(verdict_line(*r, v)));
      }
      xml += "      </properties>\n";
      if (r->status == Status::passed) {
        // nothing more
      } else if (r->status == Status::failed) {
        // The causes lead (Note [Triage]): the failure's message is the first cause, its body
        // every cause and then every finding.
        std::string body;
        for (std::size_t k = 0; k < r->causes.size(); ++k) {
          const Cause& c = r->causes[k];
          body += fmt::format("cause {}: {}\n  first seen {}; rerun: {}\n", k + 1, c.summary, report::first_seen(c),
                              c.repro);
        }
        if (!r->causes.empty()) body += "\nfindings:\n";
        for (const auto& f : r->findings) {
          body += fmt::format("[{}] {} ({} pass, phase {}, cycle {}): {}\n", f.probe, f.subject,
                              f.pass, f.phase, f.cycle, f.message);
          for (const auto& [k, v] : f.evidence) body += fmt::format("  {}: {}\n", k, v);
        }
        const Finding* lead = nullptr;
        if (!r->causes.empty() && !r->causes.front().findings.empty() &&
            r->causes.front().findings.front() < r->findings.size()) {
          lead = &r->findings[r->causes.front().findings.front()];
        } else if (!r->findings.empty()) {
          lead = &r->findings.front();
        }
        const std::string first = !r->causes.empty() ? fmt::format("{} cause{}: {}", r->causes.size(),
                                                                   r->causes.size() == 1 ? "" : "s",
                                                                   r->causes.front().summary)
                                  : lead                ? lead->message
                                                        : std::string("failed");
        xml += fmt::format("      <failure message=\"{}\" type=\"{}\">{}</failure>\n",
                           xml_escape(first), lead ? xml_escape(lead->probe) : std::string("check"),
                           xml_escape(body));
      } else if (r->status == Status::skipped) {
        xml += fmt::format("      <skipped message=\"{}\"/>\n", xml_escape(r->reason));
      } else {
        xml += fmt::format("      <error message=\"{}\" type=\"{}\">{}</error>\n",
                           xml_escape(r->reason), to_string(r->status), xml_escape(r->reason));
        if (r->crash && !r->crash->stderr_tail.empty()) {
          xml += fmt::format("      <system-err>{}</system-err>\n", xml_escape(r->crash->stderr_tail));
        }
      }
      xml += "    </testcase>\n";
    }
    xml += "  </testsuite>\n";
  }
  xml += "</testsuites>\n";
  return xml;
}

JunitReporter::JunitReporter(std::string path) : FileReporter(std::move(path), &junit_report) {}

}  // namespace graphcheck
