// graphcheck::gtest: scenario files registered as tests, and the assertions for hand-written
// tests. main() registers the scenarios of tests/data/adapter twice: clean ("Scenarios.*", must
// pass) and with mhc.rebind_broadcast enabled ("Mutated.*", must fail with the probes' evidence;
// ctest runs them apart, expecting exit 1 and the evidence in the output).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "graphcheck/gtest.h"
#include "graphcheck_test_config.h"

namespace {

using ::testing::HasSubstr;

const std::string kDir = std::string(GRAPHCHECK_TEST_SOURCE_DIR) + "/tests/data/adapter";
const std::string kFile = kDir + "/tiny_refit.yaml";

graphcheck::RunOptions options(std::set<std::string> mutations = {}) {
  graphcheck::RunOptions o;
  o.work_dir = std::string(GRAPHCHECK_TEST_BINARY_DIR) + "/gtest_adapter_work";
  o.mutations = std::move(mutations);
  return o;
}

TEST(GtestAdapter, CleanScenarioPasses) {
  EXPECT_TRUE(graphcheck::testing::scenario_passes(kFile, options()));
}

TEST(GtestAdapter, ProbeAssertionsHoldOnACorrectModel) {
  EXPECT_TRUE(graphcheck::testing::probe_holds("dsv4", kFile, "replay_diff", options()));
  EXPECT_TRUE(graphcheck::testing::probe_holds("", kFile, "address", options()));
  EXPECT_TRUE(graphcheck::testing::probe_holds("", kFile, "hooks", options()));
}

TEST(GtestAdapter, MutationCaughtByItsDeclaredProbes) {
  EXPECT_TRUE(graphcheck::testing::mutation_caught(kFile, "mhc.rebind_broadcast", options()));
}

TEST(GtestAdapter, FailureMessageCarriesTheProbesEvidence) {
  const ::testing::AssertionResult r = graphcheck::testing::scenario_passes(kFile, options({"mhc.rebind_broadcast"}));
  EXPECT_FALSE(r);
  EXPECT_THAT(r.message(), HasSubstr("scenario 'tiny-refit'"));
  EXPECT_THAT(r.message(), HasSubstr("[address] layers.0.hc_attn_fn_broadcast"));
  EXPECT_THAT(r.message(), HasSubstr("moved from 0x"));
  EXPECT_THAT(r.message(), HasSubstr("old_address: 0x"));
  const ::testing::AssertionResult address = graphcheck::testing::probe_holds("", kFile, "address", options({"mhc.rebind_broadcast"}));
  EXPECT_FALSE(address);
  EXPECT_THAT(address.message(), HasSubstr("probe 'address' on model 'dsv4'"));
}

TEST(GtestAdapter, BadScenarioFileFailsWithTheParseError) {
  const ::testing::AssertionResult r = graphcheck::testing::scenario_passes(kDir + "/no_such_file.yaml", options());
  EXPECT_FALSE(r);
  EXPECT_THAT(r.message(), HasSubstr("no_such_file.yaml"));
  const ::testing::AssertionResult m = graphcheck::testing::mutation_caught(kFile, "dummy.recursive_init", options());
  EXPECT_FALSE(m);
  EXPECT_THAT(m.message(), HasSubstr("declares no probes for mutation 'dummy.recursive_init'"));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  graphcheck::testing::register_scenario_tests(kDir, options(), "Scenarios");
  graphcheck::testing::register_scenario_tests(kDir, options({"mhc.rebind_broadcast"}), "Mutated");
  return RUN_ALL_TESTS();
}
