#include <fmt/format.h>

#include <stdexcept>

#include "backends/emulated_backend.h"
#include "graphcheck/backend.h"

namespace graphcheck {

// The cuda backend is not part of this build yet (GRAPHCHECK_HAS_CUDA only says whether libtorch
// has CUDA); when it is, `auto` picks it where a device exists.
BackendChoice make_backend(const std::string& name) {
  const std::string why_not_cuda =
      GRAPHCHECK_HAS_CUDA ? "the cuda backend is not built into this graphcheck yet"
                          : "this graphcheck is built against a libtorch without CUDA";
  if (name == "emulated") return {make_emulated_backend(), "asked for with --backend emulated"};
  if (name == "auto") {
    return {make_emulated_backend(),
            fmt::format("auto: {}, so the emulated backend (CPU) runs", why_not_cuda)};
  }
  if (name == "cuda") {
    throw std::invalid_argument(fmt::format(
        "backend 'cuda' is not available: {}; use --backend emulated (or auto)", why_not_cuda));
  }
  throw std::invalid_argument(fmt::format("unknown backend '{}': use auto, emulated or cuda", name));
}

}  // namespace graphcheck
