#pragma once
// Graph backends: capture a model's forward into a replayable graph, replay it, and expose the
// graph's read set (everything it reads that is not its input). See DESIGN.md §2.3.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graphcheck/model.h"

namespace graphcheck {

// One tensor a captured graph reads, as it was baked in at capture.
struct ReadSetEntry {
  c10::Storage storage;  // held: the graph keeps reading this storage whatever the model does
  std::int64_t storage_offset = 0;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  const void* address = nullptr;  // first byte read
  // The live tensor it was at capture, resolved by the driver ("" when the model never declared
  // it: not a parameter, buffer nor extra_tensors() entry).
  std::string name;
  bool is_view = false;  // a view of `name` rather than the tensor itself
};

// A forward that cannot be captured (host sync, data-dependent control flow).
class NotCapturable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  [[nodiscard]] virtual std::int64_t batch_size() const = 0;
  // Static buffers, as with CUDA graphs: write the input in place, replay, read the output.
  [[nodiscard]] virtual torch::Tensor static_input() const = 0;
  [[nodiscard]] virtual torch::Tensor static_output() const = 0;
  virtual void replay() = 0;
  [[nodiscard]] virtual const std::vector<ReadSetEntry>& read_set() const = 0;
};

class GraphBackend {
 public:
  virtual ~GraphBackend() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // Smallest replay-vs-eager difference the backend can produce on a correct model; the
  // tolerance is max(this, a multiple of the measured noise floor).
  [[nodiscard]] virtual double min_tolerance() const = 0;
  // Captures model.forward(example_input) as the graph for `batch_size`; throws NotCapturable
  // with the reason.
  virtual std::unique_ptr<CapturedGraph> capture(LifecycleModel& model,
                                                 const torch::Tensor& example_input,
                                                 std::int64_t batch_size) = 0;
};

// "auto" picks cuda when libtorch has CUDA and a device exists, else emulated. Throws
// std::invalid_argument naming the available backends for an unknown or unavailable one.
[[nodiscard]] std::unique_ptr<GraphBackend> make_backend(const std::string& name);

}  // namespace graphcheck
