#include "output_diff.h"

#include <algorithm>
#include <cmath>

#include "tolerance.h"

namespace graphcheck {

namespace {

// |x - y| per element, flattened, in float64, with NaN on one side only as infinity and NaN on
// both sides (or inf - inf of the same sign) as 0.
torch::Tensor element_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.to(torch::kFloat64).flatten();
  const torch::Tensor y = b.to(torch::kFloat64).flatten();
  const torch::Tensor delta = (x - y).abs();
  const torch::Tensor nan_mismatch = x.isnan().logical_xor(y.isnan());
  return torch::where(nan_mismatch, torch::full_like(delta, INFINITY), delta.nan_to_num(0.0));
}

OutputDiff diff_one(const torch::Tensor& a, const torch::Tensor& b, double tolerance) {
  OutputDiff d;
  const torch::Tensor delta = element_difference(a, b);
  if (delta.numel() == 0) return d;
  d.max_abs = delta.max().item<double>();
  const double scale = b.to(torch::kFloat64).abs().nan_to_num(0.0).max().item<double>();
  d.max_rel = scale > 0 ? d.max_abs / scale : d.max_abs;
  const torch::Tensor bad = delta > tolerance;
  d.mismatches = bad.sum().item<std::int64_t>();
  if (d.mismatches > 0) d.first_index = bad.nonzero()[0][0].item<std::int64_t>();
  return d;
}

}  // namespace

OutputDiff diff_outputs(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double tolerance) {
  OutputDiff total;
  if (a.size() != b.size()) return {INFINITY, INFINITY, 1, 0, 0};
  for (std::size_t i = 0; i < a.size(); ++i) {
    const OutputDiff d = a[i].sizes() == b[i].sizes()
                             ? diff_one(a[i], b[i], tolerance)
                             : OutputDiff{INFINITY, INFINITY, std::max<std::int64_t>(1, a[i].numel()), 0};
    if (d.mismatches > 0 && total.first_index < 0) {
      total.first_index = d.first_index;
      total.output = static_cast<std::int64_t>(i);
    }
    total.mismatches += d.mismatches;
    if (d.max_abs > total.max_abs || (std::isnan(d.max_abs) && !std::isnan(total.max_abs))) {
      total.max_abs = d.max_abs;
      total.max_rel = d.max_rel;
    }
  }
  return total;
}

bool outputs_agree(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double tolerance) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes()) return false;
    if (a[i].numel() == 0) continue;
    if ((element_difference(a[i], b[i]) > tolerance).any().item<bool>()) return false;
  }
  return true;
}

double outputs_tolerance(const std::vector<torch::Tensor>& outputs, bool exact_backend, double min_tolerance,
                         double noise_floor) {
  double tolerance = 0;
  for (const auto& out : outputs) {
    if (!out.defined() || out.numel() == 0 || !c10::isFloatingType(out.scalar_type())) continue;
    const double magnitude = out.to(torch::kFloat64).abs().nan_to_num(0.0, 0.0, 0.0).max().item<double>();
    tolerance = std::max(tolerance, replay_tolerance(exact_backend, min_tolerance, noise_floor, out.scalar_type(), magnitude));
  }
  return tolerance;
}

}  // namespace graphcheck
