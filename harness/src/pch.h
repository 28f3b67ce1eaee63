// Precompiled header for every graphcheck target that includes torch.
#pragma once
#include <torch/torch.h>
#include <fmt/format.h>
