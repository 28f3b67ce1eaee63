#pragma once
// Every difference between the libtorch versions graphcheck supports (2.4 and newer) lives here.

#include <torch/version.h>

#define GRAPHCHECK_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||             \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// Float8_e8m0fnu (UE8M0 scales) arrived in libtorch 2.7; before it, E8M0 bytes live in uint8.
#if GRAPHCHECK_TORCH_AT_LEAST(2, 7)
#define GRAPHCHECK_HAS_FLOAT8_E8M0 1
#else
#define GRAPHCHECK_HAS_FLOAT8_E8M0 0
#endif
