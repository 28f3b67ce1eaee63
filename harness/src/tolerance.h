#pragma once
// The tolerance of the replay differential (DESIGN §2.4): it comes from a measured noise floor
// (repeated eager runs of A) and the output dtype, never from the replay under judgement. On an
// exact backend (the emulated one replays bit for bit) it is 0.

#include <c10/core/ScalarType.h>

namespace graphcheck {

// Multiples applied to the noise floor and to the dtype's epsilon at the output's magnitude.
inline constexpr double kNoiseMultiple = 4.0;
inline constexpr double kEpsilonMultiple = 8.0;

// Machine epsilon of a floating dtype (0 for integer dtypes: they compare exactly).
[[nodiscard]] double dtype_epsilon(c10::ScalarType dtype);

// max(min_tolerance, kNoiseMultiple * noise_floor, kEpsilonMultiple * eps(dtype) * magnitude),
// or 0 when the backend is exact. A negative or non-finite noise floor (not measured, or NaN)
// contributes nothing; `magnitude` is max |eager output|.
[[nodiscard]] double replay_tolerance(bool exact_backend, double min_tolerance, double noise_floor,
                                      c10::ScalarType dtype, double magnitude);

}  // namespace graphcheck
