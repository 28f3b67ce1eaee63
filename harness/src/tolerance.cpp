#include "tolerance.h"

#include <algorithm>
#include <cmath>

namespace graphcheck {

double dtype_epsilon(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Double: return 2.220446049250313e-16;
    case c10::ScalarType::Float: return 1.1920928955078125e-07;
    case c10::ScalarType::Half: return 9.765625e-04;
    case c10::ScalarType::BFloat16: return 7.8125e-03;
    case c10::ScalarType::Float8_e4m3fn:
    case c10::ScalarType::Float8_e4m3fnuz: return 0.125;
    case c10::ScalarType::Float8_e5m2:
    case c10::ScalarType::Float8_e5m2fnuz: return 0.25;
    default: return 0.0;
  }
}

double replay_tolerance(bool exact_backend, double min_tolerance, double noise_floor,
                        c10::ScalarType dtype, double magnitude) {
  if (exact_backend) return 0.0;
  double t = std::max(0.0, min_tolerance);
  if (std::isfinite(noise_floor) && noise_floor > 0) t = std::max(t, kNoiseMultiple * noise_floor);
  if (std::isfinite(magnitude) && magnitude > 0) {
    t = std::max(t, kEpsilonMultiple * dtype_epsilon(dtype) * magnitude);
  }
  return t;
}

}  // namespace graphcheck
