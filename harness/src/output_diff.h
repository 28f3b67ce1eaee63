#pragma once
// How two runs' outputs differ, within a tolerance: the one home of the comparison that the
// replay differential (probes/replay_diff_probe.cpp), the coverage perturbation and the growth
// reruns (passes/) all make. Elements are compared in float64; NaN on both sides is equal, NaN on
// one side only is an infinite difference, equal infinities are equal; a shape or count mismatch
// is an infinite difference.

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace graphcheck {

struct OutputDiff {
  double max_abs = 0;
  double max_rel = 0;  // max_abs / max |reference|
  std::int64_t mismatches = 0;  // elements whose difference exceeds the tolerance
  std::int64_t first_index = -1;  // flat index of the first, in `output`
  std::int64_t output = -1;  // which output (of several) holds the first mismatch
};

// `b` is the reference (its magnitude scales max_rel).
[[nodiscard]] OutputDiff diff_outputs(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                                      double tolerance);
// No element differs by more than `tolerance` (cheaper than diff_outputs: stops at the first).
[[nodiscard]] bool outputs_agree(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                                 double tolerance);

// The differential's tolerance for `outputs` (replay_tolerance, tolerance.h) per floating output,
// at its dtype and magnitude; the largest applies. Integer outputs compare exactly. A negative
// `noise_floor` contributes nothing.
[[nodiscard]] double outputs_tolerance(const std::vector<torch::Tensor>& outputs, bool exact_backend,
                                       double min_tolerance, double noise_floor);

}  // namespace graphcheck
