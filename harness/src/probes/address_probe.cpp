// address: every range a captured graph reads must still lie in the live tensor it lay in at
// capture, at the same offset, after each refit. Reads resolve against the live tensors' address
// ranges (interior pointers included, DESIGN §2.3), so a bare device address from a CUDA graph's
// pointer audit is judged like a tensor the emulated backend pinned. A read that no live tensor
// covers any more is orphaned; one that now falls in another tensor means its memory was reused.
// Reads of memory the model never declared (not a parameter, buffer or extra_tensors() entry)
// are reported at capture: graphcheck could not track them.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <map>
#include <set>

#include "address_index.h"
#include "graphcheck/probe.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

struct Problem {
  std::string kind;  // moved | gone | reused
  const ResolvedRead* read = nullptr;
  torch::Tensor live;            // moved: the live tensor of that name now
  std::optional<AddressHit> at;  // what the old range falls in now
  std::vector<std::int64_t> batch_sizes;
};

std::string describe_read(const GraphRead& r) {
  if (r.dtype == c10::ScalarType::Undefined) return fmt::format("{} bytes", r.bytes);
  return fmt::format("{} {}", c10::toString(r.dtype), shape_string(r.sizes));
}

class AddressProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "address"; }

  void on_capture_end(RunContext& ctx, const CaptureEvent& e) override {
    ctx.measure(e, "gc/address/read_set_size", static_cast<double>(e.graph->reads.size()), "reads");
    for (const ResolvedRead& r : e.graph->reads) {
      if (!r.name.empty()) continue;
      ctx.fail(name(), e, fmt::format("undeclared tensor at {}", address_string(r.read.address)),
               fmt::format("the graph captured at batch size {} reads {} at {} that lies in no "
                           "parameter, buffer or extra_tensors() entry of the model (an undeclared "
                           "tensor): graphcheck cannot tell whether it stays live; register it or "
                           "return it from extra_tensors()",
                           e.batch_size, describe_read(r.read), address_string(r.read.address)),
               {{"address", address_string(r.read.address)},
                {"bytes", std::to_string(r.read.bytes)},
                {"shape", shape_string(r.read.sizes)},
                {"dtype", c10::toString(r.read.dtype)}});
    }
  }

  void on_refit_end(RunContext& ctx, const PhaseEvent& e) override { check(ctx, e.cycle); }
  // A level-1 wake reloads nothing (no refit events follow): the storages must still be live.
  void on_wake_end(RunContext& ctx, const SleepEvent& e) override {
    if (e.level == 1) check(ctx, e.cycle);
  }

 private:
  void check(RunContext& ctx, int cycle) {
    std::map<std::string, torch::Tensor> live;
    const std::vector<NamedTensor> tensors = ctx.live_tensors();
    for (const auto& t : tensors) {
      if (t.tensor.defined()) live.emplace(t.name, t.tensor);
    }
    const AddressIndex index(tensors);

    // One problem per tensor name, across all graphs.
    std::map<std::string, Problem> problems;
    for (const GraphView& graph : ctx.graphs()) {
      for (const ResolvedRead& r : graph.reads) {
        if (r.name.empty()) continue;  // reported at capture
        std::optional<AddressHit> now = index.resolve(r.read.address, r.read.bytes);
        if (now && now->name == r.name && now->offset == r.offset) continue;
        Problem p;
        p.read = &r;
        p.at = now;
        auto it = live.find(r.name);
        if (it != live.end()) {
          // Several names may cover the same range (aliases): the read is fine when the tensor
          // of its name still covers it at the same offset.
          const auto begin = reinterpret_cast<std::uintptr_t>(it->second.has_storage() ? it->second.data_ptr() : nullptr);
          const auto addr = reinterpret_cast<std::uintptr_t>(r.read.address);
          if (begin && addr >= begin && addr - begin == static_cast<std::uintptr_t>(r.offset) &&
              addr + r.read.bytes <= begin + tensor_extent_bytes(it->second)) {
            continue;
          }
          p.kind = now ? "reused" : "moved";
          p.live = it->second;
        } else {
          p.kind = "gone";
        }
        auto [slot, inserted] = problems.emplace(r.name, std::move(p));
        slot->second.batch_sizes.push_back(graph.batch_size);
      }
    }

    for (auto& [tensor, p] : problems) {
      const ResolvedRead& r = *p.read;
      Finding f;
      f.probe = "address";
      f.cycle = cycle;
      f.subject = tensor;
      const std::string graphs = fmt::format("batch size {}", fmt::join(p.batch_sizes, ", "));
      const bool orphaned = !p.at.has_value();
      f.evidence = {{"tensor", tensor},
                    {"old_address", address_string(r.read.address)},
                    {"read", describe_read(r.read)},
                    {"offset_in_tensor", std::to_string(r.offset)},
                    {"graphs", graphs},
                    {"orphaned", orphaned ? "yes" : "no"}};
      if (p.at) f.evidence.push_back({"old_range_now_in", p.at->name});
      if (p.kind == "moved" || p.kind == "reused") {
        const void* now = p.live.has_storage() ? p.live.data_ptr() : nullptr;
        f.evidence.insert(f.evidence.begin() + 2, {"new_address", address_string(now)});
        f.evidence.push_back({"new_shape", shape_string(p.live.sizes())});
        f.message = fmt::format(
            "tensor '{}' moved from {} to {} {}: the captured graphs ({}) "
            "still read the old address{}; update it in place with copy_()",
            tensor, address_string(r.read.address), address_string(now), ctx.after_cycle(cycle), graphs,
            orphaned ? ", which no live tensor covers any more (orphaned)"
                     : fmt::format(", which now lies in '{}'", p.at->name));
      } else {
        f.message = fmt::format(
            "tensor '{}' read by the captured graphs ({}) no longer exists {}{}: "
            "keep it alive and update it in place with copy_()",
            tensor, graphs, ctx.after_cycle(cycle),
            orphaned ? " and its old range is orphaned" : fmt::format(" (its old range now lies in '{}')", p.at->name));
      }
      ctx.add_finding(std::move(f));
    }
  }
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE("address",
                          "every address baked into a captured graph is still the live tensor",
                          AddressProbe);

}  // namespace graphcheck
