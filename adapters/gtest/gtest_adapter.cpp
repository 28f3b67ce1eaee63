#include "graphcheck/gtest.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <memory>
#include <utility>

#include "graphcheck/engine/scenario.h"

namespace graphcheck::testing {
namespace {

// Parses a scenario file with the models, probes and mutations linked into this binary.
Scenario load(const std::string& file) { return parse_scenario_file(file, default_catalog()); }

class ScenarioTest : public ::testing::Test {
 public:
  ScenarioTest(std::string file, RunOptions options) : m_file(std::move(file)), m_options(std::move(options)) {}
  void TestBody() override { EXPECT_TRUE(scenario_passes(m_file, m_options)); }

 private:
  std::string m_file;
  RunOptions m_options;
};

// A test name GoogleTest accepts: letters, digits and '_'.
std::string test_name(const std::string& scenario) {
  std::string name = scenario;
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

}  // namespace

std::string describe_failure(const ScenarioRecord& r) {
  std::string out = fmt::format("scenario '{}' ({}) {}", r.name, r.file, to_string(r.status));
  if (!r.reason.empty()) out += fmt::format(": {}", r.reason);
  for (const Finding& f : r.findings) {
    out += fmt::format("\n  [{}] {} ({} pass, phase {}, cycle {}{}): {}", f.probe, f.subject, f.pass, f.phase,
                       f.cycle, f.batch_size ? fmt::format(", batch {}", f.batch_size) : "", f.message);
    for (const auto& [key, value] : f.evidence) out += fmt::format("\n      {}: {}", key, value);
  }
  return out;
}

int register_scenario_tests(const std::string& path, const RunOptions& options, const std::string& suite) {
  int count = 0;
  for (const std::string& file : collect_scenario_files({path})) {
    std::string name;
    try {
      name = test_name(load(file).name);
    } catch (const std::exception&) {
      name = test_name(file);  // the test reports the parse error
    }
    ::testing::RegisterTest(suite.c_str(), name.c_str(), nullptr, file.c_str(), file.c_str(), 1,
                            [file, options]() -> ::testing::Test* { return new ScenarioTest(file, options); });
    ++count;
  }
  return count;
}

::testing::AssertionResult scenario_passes(const std::string& file, const RunOptions& options) {
  Scenario scenario;
  try {
    scenario = load(file);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << e.what();
  }
  const ScenarioRecord r = run_scenario(scenario, options);
  if (r.status == Status::passed && r.findings.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << describe_failure(r);
}

::testing::AssertionResult probe_holds(const std::string& fixture, const std::string& file, const std::string& probe,
                                       const RunOptions& options) {
  Scenario scenario;
  try {
    scenario = load(file);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << e.what();
  }
  if (!fixture.empty()) scenario.fixture = fixture;
  scenario.checks = {probe};
  scenario.mutations.clear();
  const ScenarioRecord r = run_scenario(scenario, options);
  if (r.status == Status::passed && r.findings.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << fmt::format("probe '{}' on model '{}': ", probe, scenario.fixture)
                                       << describe_failure(r);
}

::testing::AssertionResult mutation_caught(const std::string& file, const std::string& mutation,
                                           const RunOptions& options) {
  Scenario scenario;
  try {
    scenario = load(file);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << e.what();
  }
  if (!scenario.mutations.count(mutation)) {
    return ::testing::AssertionFailure() << fmt::format(
               "{} declares no probes for mutation '{}': add it under 'mutations:'", file, mutation);
  }
  RunOptions with = options;
  with.mutations.insert(mutation);
  const ScenarioRecord r = run_scenario(scenario, with);
  if (r.status != Status::passed && r.status != Status::failed) {
    return ::testing::AssertionFailure() << describe_failure(r);
  }
  const MutationVerdict v = judge_mutation(r, mutation);
  if (v.missed.empty()) return ::testing::AssertionSuccess();
  std::vector<std::string> caught;
  for (const auto& [probe, pass] : v.caught) caught.push_back(fmt::format("{} ({} pass)", probe, pass));
  return ::testing::AssertionFailure() << fmt::format("mutation '{}' on '{}' was missed by {} (caught by: {})",
                                                      mutation, scenario.name, fmt::join(v.missed, ", "),
                                                      caught.empty() ? std::string("none")
                                                                     : fmt::format("{}", fmt::join(caught, ", ")));
}

}  // namespace graphcheck::testing
