// The model's scenarios as GoogleTest tests (graphcheck::gtest), and hand-written checks of its
// own. Run from the project directory: scenario paths are relative to it.

#include <graphcheck/gtest.h>

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
  graphcheck::testing::register_scenario_tests("scenarios", {}, "Scenarios");  // one test per file
  return RUN_ALL_TESTS();
}
