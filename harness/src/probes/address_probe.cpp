// address: every tensor in a captured graph's read set must still be the live tensor of that
// name after each refit, and no read-set storage may be orphaned (nothing live references it).
// Reads of tensors the model never declared (not a parameter, buffer or extra_tensors() entry)
// are reported at capture: graphcheck could not track them.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <map>
#include <set>

#include "graphcheck/probe.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

struct Problem {
  std::string kind;  // moved | gone | orphaned
  const ReadSetEntry* entry = nullptr;
  torch::Tensor live;
  bool orphaned = false;
  std::vector<std::int64_t> batch_sizes;
};

class AddressProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "address"; }

  void on_capture_end(RunContext& ctx, const CaptureEvent& e) override {
    Measurement m;
    m.tag = "gc/address/read_set_size";
    m.value = static_cast<double>(e.graph->read_set().size());
    m.unit = "tensors";
    m.batch_size = e.batch_size;
    ctx.add_measurement(std::move(m));
    for (const auto& entry : e.graph->read_set()) {
      if (!entry.name.empty()) continue;
      Finding f;
      f.probe = "address";
      f.batch_size = e.batch_size;
      f.subject = fmt::format("unregistered tensor at {}", address_string(entry.address));
      f.message = fmt::format(
          "the graph captured at batch size {} reads a {} {} tensor at {} that is not a "
          "parameter, buffer or extra_tensors() entry of the model: graphcheck cannot tell "
          "whether it stays live; register it or return it from extra_tensors()",
          e.batch_size, c10::toString(entry.dtype), shape_string(entry.sizes),
          address_string(entry.address));
      f.evidence = {{"address", address_string(entry.address)},
                    {"shape", shape_string(entry.sizes)},
                    {"dtype", c10::toString(entry.dtype)}};
      ctx.add_finding(std::move(f));
    }
  }

  void on_refit_end(RunContext& ctx, const PhaseEvent& e) override { check(ctx, e.cycle); }

 private:
  void check(RunContext& ctx, int cycle) {
    std::map<std::string, torch::Tensor> live;
    std::set<const c10::StorageImpl*> live_storages;
    for (auto& t : live_tensors(ctx.model())) {
      if (!t.tensor.defined()) continue;
      live.emplace(t.name, t.tensor);
      if (t.tensor.has_storage()) live_storages.insert(t.tensor.storage().unsafeGetStorageImpl());
    }

    // One problem per tensor name (or per storage when unnamed), across all graphs.
    std::map<std::string, Problem> problems;
    for (CapturedGraph* graph : ctx.graphs()) {
      for (const ReadSetEntry& entry : graph->read_set()) {
        const bool orphaned = !live_storages.count(entry.storage.unsafeGetStorageImpl());
        std::string key = entry.name;
        Problem p;
        p.entry = &entry;
        p.orphaned = orphaned;
        if (entry.name.empty()) {
          if (!orphaned) continue;
          key = address_string(entry.address);
          p.kind = "orphaned";
        } else {
          auto it = live.find(entry.name);
          if (it == live.end()) {
            p.kind = "gone";
          } else {
            const torch::Tensor& t = it->second;
            const bool same_storage =
                t.has_storage() && t.storage().unsafeGetStorageImpl() == entry.storage.unsafeGetStorageImpl();
            const bool same_place = entry.is_view ? same_storage
                                                  : same_storage && t.data_ptr() == entry.address &&
                                                        t.sizes().vec() == entry.sizes;
            if (same_place) continue;  // a live tensor holds that storage: not orphaned either
            p.kind = "moved";
            p.live = t;
          }
        }
        auto [slot, inserted] = problems.emplace(key, std::move(p));
        slot->second.batch_sizes.push_back(graph->batch_size());
      }
    }

    for (auto& [key, p] : problems) {
      const ReadSetEntry& entry = *p.entry;
      Finding f;
      f.probe = "address";
      f.cycle = cycle;
      f.subject = entry.name.empty() ? key : entry.name;
      const std::string graphs = fmt::format("batch size {}", fmt::join(p.batch_sizes, ", "));
      f.evidence = {{"tensor", f.subject},
                    {"old_address", address_string(entry.address)},
                    {"old_shape", shape_string(entry.sizes)},
                    {"dtype", c10::toString(entry.dtype)},
                    {"graphs", graphs},
                    {"orphaned", p.orphaned ? "yes" : "no"}};
      if (p.kind == "moved") {
        f.evidence.insert(f.evidence.begin() + 2, {"new_address", address_string(p.live.data_ptr())});
        f.evidence.push_back({"new_shape", shape_string(p.live.sizes())});
        f.message = fmt::format(
            "tensor '{}' moved from {} to {} during refit cycle {}: the captured graphs ({}) "
            "still read the old address{}; update it in place with copy_()",
            entry.name, address_string(entry.address), address_string(p.live.data_ptr()), cycle,
            graphs, p.orphaned ? ", which no live tensor references any more (orphaned)" : "");
      } else if (p.kind == "gone") {
        f.message = fmt::format(
            "tensor '{}' read by the captured graphs ({}) no longer exists after refit cycle {}: "
            "keep it alive and update it in place with copy_()",
            entry.name, graphs, cycle);
      } else {
        f.message = fmt::format(
            "the captured graphs ({}) read {} storage at {}{} that no live tensor references "
            "after refit cycle {} (orphaned): replay reads memory the model no longer updates",
            graphs, c10::toString(entry.dtype), address_string(entry.address),
            entry.name.empty() ? "" : fmt::format(" (was '{}')", entry.name), cycle);
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
