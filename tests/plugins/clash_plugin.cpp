// A plugin whose model name is already built into graphcheck: loading it must fail with exit 2
// and name the clash, never abort.

#include "graphcheck/model.h"

GRAPHCHECK_REGISTER_MODEL("deep_stack", [](const graphcheck::ModelConfig&) {
  return std::unique_ptr<graphcheck::LifecycleModel>();
});
