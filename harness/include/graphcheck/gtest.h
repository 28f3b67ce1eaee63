#pragma once
// GoogleTest adapter (graphcheck::gtest). Scenario files become tests, and hand-written tests get
// assertions whose failure message is the probes' evidence:
//
//   // in main(), before RUN_ALL_TESTS():
//   graphcheck::testing::register_scenario_tests("scenarios/");   // a test per scenario file
//
//   TEST(MyModel, RefitKeepsGraphsFresh) {
//     EXPECT_SCENARIO_PASSES("scenarios/my_model.yaml");
//     EXPECT_REPLAY_MATCHES_EAGER("my_model", "scenarios/refit.yaml");  // model, scenario file
//     EXPECT_ADDRESSES_STABLE("my_model", "scenarios/refit.yaml");
//     EXPECT_MUTATION_CAUGHT("scenarios/my_model.yaml", "my_model.stale_scale");
//   }
//
// Scenarios run in the test's own process (the driver never throws; a model that crashes takes
// the test binary with it: use the CLI for isolation).

#include <gtest/gtest.h>

#include <string>

#include "graphcheck/engine/driver.h"

namespace graphcheck::testing {

// Registers a test `suite.<scenario name>` for every scenario file at `path` (a file, or every
// *.yaml below a directory), run with `options`. A test fails with every finding (probe, phase,
// cycle, message, evidence), or with the error of a scenario that does not parse or load. Call
// it before RUN_ALL_TESTS(). Returns how many tests it registered; throws ScenarioError for a
// path that does not exist.
int register_scenario_tests(const std::string& path, const RunOptions& options = {},
                            const std::string& suite = "graphcheck");

// The scenario file passes (status passed, no finding).
::testing::AssertionResult scenario_passes(const std::string& file, const RunOptions& options = {});

// The scenario run with only `probe` among its checks passes, with the scenario's model replaced
// by `fixture` ("" keeps it).
::testing::AssertionResult probe_holds(const std::string& fixture, const std::string& file, const std::string& probe,
                                       const RunOptions& options = {});

// The scenario run with `mutation` enabled is caught by every probe it declares for it.
::testing::AssertionResult mutation_caught(const std::string& file, const std::string& mutation,
                                           const RunOptions& options = {});

// A record's failure as text: status, reason, each finding with its evidence.
[[nodiscard]] std::string describe_failure(const ScenarioRecord& record);

}  // namespace graphcheck::testing

#define EXPECT_SCENARIO_PASSES(file) EXPECT_TRUE(::graphcheck::testing::scenario_passes(file))
#define ASSERT_SCENARIO_PASSES(file) ASSERT_TRUE(::graphcheck::testing::scenario_passes(file))
// replay(A) = eager(A) = eager(B) after the capture and every refit of the scenario.
#define EXPECT_REPLAY_MATCHES_EAGER(model, file) \
  EXPECT_TRUE(::graphcheck::testing::probe_holds(model, file, "replay_diff"))
// Every address a captured graph reads is still the live tensor of its name after every refit.
#define EXPECT_ADDRESSES_STABLE(model, file) EXPECT_TRUE(::graphcheck::testing::probe_holds(model, file, "address"))
// Every declared hook ran, in order, for every load, and a second PWAL changes nothing.
#define EXPECT_HOOKS_RUN(model, file) EXPECT_TRUE(::graphcheck::testing::probe_holds(model, file, "hooks"))
#define EXPECT_MUTATION_CAUGHT(file, mutation) \
  EXPECT_TRUE(::graphcheck::testing::mutation_caught(file, mutation))
