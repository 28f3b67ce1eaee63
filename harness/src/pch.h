// Precompiled header for every graphcheck target that includes torch.
//
// Not <torch/torch.h>: that umbrella (optimisers, data loaders, every nn module, serialization)
// costs each translation unit ~10 s of template instantiation even from a precompiled header,
// against ~5 s for this set; the project's sources include these narrower headers themselves
// (measured on one fixture: 27 s -> 17 s per translation unit at -O2).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>
#include <fmt/format.h>
