#pragma once
// Graph backends: capture a model's forward into a replayable graph, replay it, and report what
// the graph reads (everything it reads that is not its input) as address ranges. See DESIGN.md
// §2.3. The contract holds a real CUDA graph: a read is an address range (a CUDA graph's pointer
// audit yields bare device addresses, interior pointers included), and a backend says whether the
// graph keeps the storages it reads alive (a CUDA graph does not). The driver resolves reads
// against the live tensors (interior pointer -> tensor + offset).

#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graphcheck/model.h"

namespace graphcheck {

// One range of memory a captured graph reads, as baked in at capture.
struct GraphRead {
  const void* address = nullptr;  // first byte
  std::size_t bytes = 0;          // 0: unknown (a bare pointer)
  // Where known (the emulated backend knows; a pointer audit does not).
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  // Defined only when the backend keeps the storage alive for the graph (then, and only then, a
  // storage nothing live references may be poisoned without writing into freed memory).
  c10::Storage held;
};

// A forward that cannot be captured (host sync, data-dependent control flow).
class NotCapturable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A forward the backend cannot capture though a CUDA graph could: a limit of the backend, not a
// bug of the model. The scenario ends as an error (exit 2) that names the backend to use instead.
class BackendLimit : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Note [Foreign objects in recorded forwards]: a recording of a Python forward can hold Python
// objects (an argument of a custom op), and those may be copied or freed only under the
// interpreter's lock (the GIL), which the engine does not hold. A front whose model code runs in
// another language registers how to take that lock; the emulated backend takes it wherever a
// recording is freed. Without one, `fn` just runs.
using HostLock = std::function<void(const std::function<void()>&)>;
void set_host_lock(HostLock lock);
void with_host_lock(const std::function<void()>& fn);

// Note [Source of recorded ops]: where the code that runs now is, for a front whose model code runs
// in another language: "model.py:42", the innermost frame outside torch's own package (the
// innermost frame where every one is torch's). The emulated backend names with it the line of each
// op it records (a frozen branch, a baked value), of a host sync and of an op where two eager runs
// part. Called once per recorded op: it must be cheap. Without one, places are "" (a C++ model).
using SourceHook = std::function<std::string()>;
void set_source_hook(SourceHook hook);

// Whether this thread is inside one of the emulated backend's recordings of a forward (a capture or
// a fresh recording).
[[nodiscard]] bool tracing_forward();

class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  [[nodiscard]] virtual std::int64_t batch_size() const = 0;
  // Static buffers, as with CUDA graphs: write the inputs in place, replay, read the outputs.
  [[nodiscard]] virtual const TensorList& static_inputs() const = 0;
  [[nodiscard]] virtual const TensorList& static_outputs() const = 0;
  virtual void replay() = 0;
  [[nodiscard]] virtual const std::vector<GraphRead>& reads() const = 0;
};

// What a fresh capture of the same forward, made now, would bake differently from a captured graph
// (GraphBackend::recapture_diff): the host values the graph holds as constants (scalars, flags,
// shapes passed to its ops as arguments) and the op sequence itself (a branch decided on the host).
struct BakedValue {
  std::string op;         // the op that takes it: "aten::mul"
  int argument = 0;       // its position among the op's inputs (0-based)
  std::string at_capture;  // the value the graph holds
  std::string now;         // the value a capture made now holds
  std::string source;      // "model.py:42" where the backend knows it (Python models), else ""
};
struct RecaptureDiff {
  bool supported = false;
  std::string unsupported_reason;  // when !supported: what the backend cannot compare, and why
  bool control_flow_differs = false;
  // When it does: the first op where the two captures part, with its source where known.
  std::string divergence;
  std::string divergence_source;
  std::vector<BakedValue> values;  // host values that differ (same op sequence only)
  // Tensors made outside the forward that an op reads at another address in the fresh recording
  // than in the capture (same op sequence only), in op order. Which tensor each address is, the
  // driver resolves: the same tensor rebound is the address probe's cause; another tensor (or
  // another part of one) is a choice the capture froze, and the driver makes it the divergence.
  struct MovedRead {
    std::size_t op = 0;   // 0-based
    std::string op_name;  // "aten::mm"
    int argument = 0;
    GraphRead at_capture;
    GraphRead now;
    std::string source;
  };
  std::vector<MovedRead> moved_reads;
  // Where the divergence is such a read: the tensor read now, then the one read at capture.
  std::vector<std::string> chosen_tensors;
  [[nodiscard]] bool differs() const { return control_flow_differs || !values.empty(); }
};

// Memory as the backend's allocator sees it: the CPU's counting allocator, or the CUDA caching
// allocator's device stats.
class MemoryMeter {
 public:
  virtual ~MemoryMeter() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // Counting happens between start() and stop() (nesting).
  virtual void start() = 0;
  virtual void stop() = 0;
  // A moment: allocations made after it are "since" it.
  [[nodiscard]] virtual std::uint64_t now() const = 0;
  [[nodiscard]] virtual std::int64_t live_bytes() const = 0;
  // Bytes of allocations made since `moment` that are still alive.
  [[nodiscard]] virtual std::int64_t alive_since(std::uint64_t moment) const = 0;
  // Highest live_bytes() since the last reset_peak().
  [[nodiscard]] virtual std::int64_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
  // The allocations made since `moment` that are still alive, one by one, for a meter that keeps
  // them (the CPU counter): what the memory probe resolves to the tensors holding them. Empty
  // where the meter counts bytes only (device statistics).
  struct Block {
    const void* address = nullptr;
    std::size_t bytes = 0;
  };
  [[nodiscard]] virtual std::vector<Block> blocks_alive_since(std::uint64_t moment) const {
    (void)moment;
    return {};
  }
};

// A measurement a backend takes itself (GPU time from CUDA events, device memory, CUPTI counts,
// the pointer audit's statistics). The driver drains them into the record after every pass.
struct BackendMeasurement {
  std::string tag;  // "gc/cuda/replay/gpu_seconds"
  double value = 0;
  std::string unit;
  std::string phase;  // "warm-up", "capture", "replay"
  std::int64_t batch_size = 0;
};

class GraphBackend {
 public:
  virtual ~GraphBackend() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // Where models and inputs live for this backend: the driver moves each model it constructs
  // (module().to(device)) and each input batch there. CPU for the emulated backend.
  [[nodiscard]] virtual c10::Device device() const { return c10::Device(c10::kCPU); }
  // Measurements taken since the last call (none by default).
  [[nodiscard]] virtual std::vector<BackendMeasurement> take_measurements() { return {}; }
  // true: replay reproduces eager bit for bit on a correct model (the emulated backend), so the
  // tolerance is 0.
  [[nodiscard]] virtual bool exact() const = 0;
  // Smallest replay-vs-eager difference the backend can produce on a correct model; the
  // tolerance is never below it.
  [[nodiscard]] virtual double min_tolerance() const = 0;
  // Whether a captured graph holds the storages it reads (GraphRead::held).
  [[nodiscard]] virtual bool keeps_storages_alive() const = 0;
  [[nodiscard]] virtual MemoryMeter& memory_meter() = 0;
  // Waits for all work the backend queued (no-op on CPU).
  virtual void synchronize() = 0;
  // Captures model.forward_all(example_inputs) as the graph for `batch_size`; throws
  // NotCapturable with the reason.
  virtual std::unique_ptr<CapturedGraph> capture(LifecycleModel& model,
                                                 const TensorList& example_inputs,
                                                 std::int64_t batch_size) = 0;
  // Whether recapture_diff() records anything (the default says it cannot). The validate pass
  // runs the eager op log (Note [Eager op log]) only for a backend that does: the log exists to
  // skip recordings.
  [[nodiscard]] virtual bool records_forwards() const { return false; }
  // Records model.forward_all(inputs) as a capture would now, without keeping it, and compares
  // it with `graph` (one of this backend's). The default says the backend cannot.
  virtual RecaptureDiff recapture_diff(const CapturedGraph& graph, LifecycleModel& model, const TensorList& inputs) {
    (void)graph;
    (void)model;
    (void)inputs;
    RecaptureDiff d;
    d.unsupported_reason = "this backend records no op sequence it could compare";
    return d;
  }
};

struct BackendChoice {
  std::unique_ptr<GraphBackend> backend;
  std::string reason;  // why this backend ran: "asked for emulated", "auto: ..."
};

// "auto" picks cuda only when the cuda backend is built and a device exists, else emulated, and
// says why. Throws std::invalid_argument naming the available backends for an unknown or
// unavailable one.
[[nodiscard]] BackendChoice make_backend(const std::string& name);

}  // namespace graphcheck
