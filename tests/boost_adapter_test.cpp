// graphcheck::boost_test: the scenarios of tests/data/adapter as Boost.Test cases, clean (suite
// "clean", must pass) and with mhc.rebind_broadcast enabled (suite "mutated", must fail with the
// probes' evidence; ctest runs the suites apart), plus BOOST_CHECK_SCENARIO_PASSES.

#define BOOST_TEST_NO_MAIN
#include "graphcheck/boost_test.h"

#include <string>

#include "graphcheck_test_config.h"

namespace {

const std::string kDir = std::string(GRAPHCHECK_TEST_SOURCE_DIR) + "/tests/data/adapter";

graphcheck::RunOptions options(std::set<std::string> mutations = {}) {
  graphcheck::RunOptions o;
  o.work_dir = std::string(GRAPHCHECK_TEST_BINARY_DIR) + "/boost_adapter_work";
  o.mutations = std::move(mutations);
  return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(check_macro_passes_on_a_clean_scenario) {
  BOOST_CHECK(graphcheck::boost_test::scenario_passes(kDir + "/tiny_refit.yaml", options()));
}

BOOST_AUTO_TEST_CASE(failure_message_carries_the_evidence) {
  const auto r = graphcheck::boost_test::scenario_passes(kDir + "/tiny_refit.yaml", options({"mhc.rebind_broadcast"}));
  BOOST_CHECK(!r);
  const auto text = r.message();
  const std::string message(text.begin(), text.end());
  BOOST_CHECK(message.find("[address] layers.0.hc_attn_fn_broadcast") != std::string::npos);
}

bool init_unit_test() {
  graphcheck::boost_test::register_scenario_cases(kDir, options(), "clean");
  graphcheck::boost_test::register_scenario_cases(kDir, options({"mhc.rebind_broadcast"}), "mutated");
  return true;
}

int main(int argc, char** argv) { return boost::unit_test::unit_test_main(&init_unit_test, argc, argv); }
