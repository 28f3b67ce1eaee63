#pragma once
// Boost.Test adapter (graphcheck::boost_test): scenario files as Boost.Test cases, and a check
// whose failure message is the probes' evidence. Link Boost's shared unit_test_framework
// (BOOST_TEST_DYN_LINK, which the graphcheck::boost_test target sets):
//
//   bool init_unit_test() {                       // BOOST_TEST_NO_MAIN + unit_test_main(...)
//     graphcheck::boost_test::register_scenario_cases("scenarios/");
//     return true;
//   }
//   BOOST_AUTO_TEST_CASE(my_model_refit) { BOOST_CHECK_SCENARIO_PASSES("scenarios/my_model.yaml"); }

#include <boost/test/unit_test.hpp>

#include <string>

#include "graphcheck/engine/driver.h"

namespace graphcheck::boost_test {

// Adds a test case per scenario file at `path` (a file, or every *.yaml below a directory) to a
// test suite `suite_name` under the master suite, each run with `options`; a case fails with every
// finding and its evidence. Call it from the init function. Returns how many cases it added;
// throws ScenarioError for a path that does not exist.
int register_scenario_cases(const std::string& path, const RunOptions& options = {},
                            const std::string& suite_name = "graphcheck");

// The scenario file passes (status passed, no finding); the message is the failure's evidence.
[[nodiscard]] boost::test_tools::assertion_result scenario_passes(const std::string& file,
                                                                  const RunOptions& options = {});

}  // namespace graphcheck::boost_test

#define BOOST_CHECK_SCENARIO_PASSES(file) BOOST_CHECK(::graphcheck::boost_test::scenario_passes(file))
#define BOOST_REQUIRE_SCENARIO_PASSES(file) BOOST_REQUIRE(::graphcheck::boost_test::scenario_passes(file))
