// The model's scenarios as GoogleTest tests (graphcheck::gtest), and hand-written checks of its
// own. Run from the project directory: scenario paths are relative to it.

#include <graphcheck/gtest.h>
#include <graphcheck/scenario.h>

#include <cstdio>

namespace {

const char* const kScenario = "scenarios/external_gated_mlp.yaml";

TEST(ExternalGatedMlp, ReplayMatchesEagerAfterEveryRefit) {
  EXPECT_REPLAY_MATCHES_EAGER("external_gated_mlp", kScenario);
}

TEST(ExternalGatedMlp, AddressesStayStable) { EXPECT_ADDRESSES_STABLE("external_gated_mlp", kScenario); }

TEST(ExternalGatedMlp, PlantedBugIsCaught) { EXPECT_MUTATION_CAUGHT(kScenario, "external_gated_mlp.fold_once"); }

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    graphcheck::testing::register_scenario_tests("scenarios", {}, "Scenarios");  // one test per file
  } catch (const graphcheck::ScenarioError& e) {
    std::fprintf(stderr, "model_tests: %s: run it from the project's directory\n", e.what());
    return 2;
  }
  return RUN_ALL_TESTS();
}
