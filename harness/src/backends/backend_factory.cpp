#include <fmt/format.h>

#include <stdexcept>

#include "backends/emulated_backend.h"
#include "graphcheck/backend.h"

namespace graphcheck {

std::unique_ptr<GraphBackend> make_backend(const std::string& name) {
  if (name == "emulated" || name == "auto") {
    // The CUDA backend is not built yet, so auto means emulated.
    return make_emulated_backend();
  }
  if (name == "cuda") {
    throw std::invalid_argument(
        "backend 'cuda' is not available in this build of graphcheck: use --backend emulated "
        "(or auto)");
  }
  throw std::invalid_argument(fmt::format("unknown backend '{}': use auto, emulated or cuda", name));
}

}  // namespace graphcheck
