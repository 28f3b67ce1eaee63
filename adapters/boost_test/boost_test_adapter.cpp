#include "graphcheck/boost_test.h"

#include <fmt/format.h>

#include <cctype>
#include <deque>
#include <exception>

#include "graphcheck/engine/scenario.h"

namespace graphcheck::boost_test {
namespace {

std::string describe(const ScenarioRecord& r) {
  std::string out = fmt::format("scenario '{}' ({}) {}", r.name, r.file, to_string(r.status));
  if (!r.reason.empty()) out += fmt::format(": {}", r.reason);
  for (const Finding& f : r.findings) {
    out += fmt::format("\n  [{}] {} ({} pass, phase {}, cycle {}{}): {}", f.probe, f.subject, f.pass, f.phase,
                       f.cycle, f.batch_size ? fmt::format(", batch {}", f.batch_size) : "", f.message);
    for (const auto& [key, value] : f.evidence) out += fmt::format("\n      {}: {}", key, value);
  }
  return out;
}

}  // namespace

boost::test_tools::assertion_result scenario_passes(const std::string& file, const RunOptions& options) {
  Scenario scenario;
  try {
    scenario = parse_scenario_file(file, default_catalog());
  } catch (const std::exception& e) {
    boost::test_tools::assertion_result failed(false);
    failed.message() << e.what();
    return failed;
  }
  const ScenarioRecord r = run_scenario(scenario, options);
  if (r.status == Status::passed && r.findings.empty()) return true;
  boost::test_tools::assertion_result failed(false);
  failed.message() << describe(r);
  return failed;
}

int register_scenario_cases(const std::string& path, const RunOptions& options, const std::string& suite_name) {
  namespace utf = boost::unit_test;
  auto* suite = BOOST_TEST_SUITE(suite_name);
  int count = 0;
  for (const std::string& file : collect_scenario_files({path})) {
    std::string name = file;
    try {
      name = parse_scenario_file(file, default_catalog()).name;
    } catch (const std::exception&) {
      // the case reports the parse error
    }
    // Boost.Test names: letters, digits and '_'.
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    // Boost keeps the file name as a pointer: it must outlive the test tree.
    static std::deque<std::string> file_names;
    file_names.push_back(file);
    suite->add(utf::make_test_case([file, options] { BOOST_CHECK(scenario_passes(file, options)); }, name,
                                   file_names.back(), 1));
    ++count;
  }
  utf::framework::master_test_suite().add(suite);
  return count;
}

}  // namespace graphcheck::boost_test
