// A plugin whose model name is already built into graphcheck: loading it must fail with exit 2
// and name the clash, never abort.

#include "graphcheck/model.h"

GRAPHCHECK_REGISTER_MODEL("deep_stack", [](const graphcheck::ModelConfig&) {
  return std::unique_ptr<graphcheck::LifecycleModel>();
});

// And a reporter named like a built-in one.
#include "graphcheck/engine/reporter.h"

GRAPHCHECK_REGISTER_REPORTER({"json", "a second JSON reporter", nullptr,
                              [](const std::string& path) { return std::make_unique<graphcheck::JsonReporter>(path); }});
