#include <fmt/format.h>

#include <stdexcept>

#include "backends/emulated_backend.h"
#include "graphcheck/engine/backend.h"
#if GRAPHCHECK_HAS_CUDA
#include "backends/cuda_backend.h"
#endif

namespace graphcheck {

// `auto` picks cuda where it is built and a device is usable; otherwise the emulated backend,
// and the reason says why (the report carries it).
BackendChoice make_backend(const std::string& name) {
  if (name == "emulated") return {make_emulated_backend(), "asked for with --backend emulated"};
  if (name != "auto" && name != "cuda") {
    throw std::invalid_argument(
        fmt::format("unknown backend '{}': use auto, emulated or cuda", name));
  }
#if GRAPHCHECK_HAS_CUDA
  const CudaAvailability cuda = cuda_availability();
  if (cuda.usable || name == "cuda") {
    std::string mechanisms;
    auto backend = make_cuda_backend(mechanisms);  // throws std::invalid_argument with the fix
    return {std::move(backend),
            fmt::format("{}: {}", name == "cuda" ? "asked for with --backend cuda" : "auto",
                        mechanisms)};
  }
  const std::string why_not_cuda = cuda.reason;
#else
  const std::string why_not_cuda =
      "this graphcheck is built without the cuda backend (it needs a CUDA build of libtorch and "
      "nvcc: bash ci/cuda-build.sh)";
  if (name == "cuda") {
    throw std::invalid_argument(fmt::format(
        "backend 'cuda' is not available: {}; use --backend emulated (or auto)", why_not_cuda));
  }
#endif
  return {make_emulated_backend(),
          fmt::format("auto: {}, so the emulated backend (CPU) runs", why_not_cuda)};
}

}  // namespace graphcheck
