// stream_order: a load must not depend on the order its tensors stream in (Note [Stream order],
// engine/stream_order.cpp). The driver loads the same weights in other orders on fresh models,
// each followed by PWAL; every live tensor that then differs from the canonical load's is named,
// with the streamed tensors of its module in both orders, so that the reader sees which pair the
// loader combines as it arrives. One finding per load, naming the first order that differs and
// listing the others.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "graphcheck/probe.h"

namespace graphcheck {
namespace {

// `names` shortened for a message: the first few and how many more.
std::string order_head(const std::vector<std::string>& names, std::size_t count = 6) {
  if (names.size() <= count) return fmt::format("{}", fmt::join(names, ", "));
  return fmt::format("{}, ... ({} in all)", fmt::join(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(count), ", "),
                     names.size());
}

// The names of `near` in the order of `order`.
std::vector<std::string> names_in_order(const std::vector<std::string>& near, const std::vector<std::string>& order) {
  std::vector<std::string> out;
  for (const auto& name : order) {
    if (std::find(near.begin(), near.end(), name) != near.end()) out.push_back(name);
  }
  return out;
}

class StreamOrderProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "stream_order"; }

  void on_stream_orders_compared(RunContext& ctx, const StreamOrderEvent& e) override {
    const StreamOrderVariant* first = nullptr;
    std::vector<std::string> orders;
    for (const auto& v : e.variants) {
      if (v.differing.empty()) continue;
      if (!first) first = &v;
      orders.push_back(v.order);
    }
    ctx.measure(e, "gc/stream_order/orders_differing", static_cast<double>(orders.size()), "orders");
    if (!first) return;
    std::vector<std::string> tensors, details;
    for (const auto& d : first->differing) {
      tensors.push_back(d.tensor);
      details.push_back(fmt::format("{} ({})", d.tensor, d.detail));
    }
    // The streamed tensors next to the first differing one, in both orders: the pair that is
    // combined as it arrives.
    std::string pair;
    for (const auto& d : first->differing) {
      if (d.streamed_near.size() < 2) continue;
      pair = fmt::format("; its module's tensors stream as {} in the checkpoint's order and as {} {}",
                         fmt::join(d.streamed_near, ", "), fmt::join(names_in_order(d.streamed_near, first->names), ", "),
                         first->order);
      break;
    }
    // Only orders cut into load_weights() calls differ: the calls, not the order, are the cause.
    const bool by_calls = std::all_of(e.variants.begin(), e.variants.end(), [](const StreamOrderVariant& v) {
      return v.differing.empty() || v.calls > 1;
    });
    constexpr std::size_t kListed = 8;
    std::vector<std::string> listed(details.begin(), details.begin() + static_cast<std::ptrdiff_t>(std::min(kListed, details.size())));
    if (details.size() > kListed) listed.push_back(fmt::format("and {} more", details.size() - kListed));
    const std::string also =
        orders.size() > 1 ? fmt::format(" (also after: {})", fmt::join(orders.begin() + 1, orders.end(), "; ")) : std::string();
    const std::string message =
        by_calls ? fmt::format("the load depends on how its stream is cut into load_weights() calls: {} of the same "
                               "weights ({}) streamed {} leaves {} live tensor{} different from streaming them in one "
                               "call, after PWAL: {}{}{}; every order in one call agrees. RL weight sync sends its "
                               "buckets as calls of their own: derive tensors in process_weights_after_loading(), "
                               "not in load_weights() from what one call brings",
                               e.load, e.source, first->order, tensors.size(), tensors.size() == 1 ? "" : "s",
                               fmt::join(listed, ", "), pair, also)
                 : fmt::format("the load depends on stream order: {} of the same weights ({}) streamed {} leaves {} "
                               "live tensor{} different from streaming them in the checkpoint's order, after PWAL: "
                               "{}{}{}; real loaders get tensors in any order (several checkpoint files, RL weight "
                               "sync in named_parameters() order): combine tensors in "
                               "process_weights_after_loading(), not in load_weights() as each arrives",
                               e.load, e.source, first->order, tensors.size(), tensors.size() == 1 ? "" : "s",
                               fmt::join(listed, ", "), pair, also);
    ctx.fail(name(), e, tensors.front(), message,
             {{"cause", by_calls ? "load_weights() calls" : "stream order"},
              {"tensor", tensors.front()},
              {"tensors", fmt::format("{}", fmt::join(tensors, "; "))},
              {"load", e.load},
              {"orders_differing", fmt::format("{}", fmt::join(orders, "; "))},
              {"canonical_order", order_head(e.canonical)},
              {"other_order", fmt::format("{}: {}", first->order, order_head(first->names))}});
  }
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE_IN("stream_order",
                             "a load gives the same state after PWAL whatever order its tensors stream in "
                             "(reversed, shuffled, by name, in buckets; cut into load_weights() calls where the "
                             "scenario refits)",
                             StreamOrderProbe, ::graphcheck::Pass::stream_order);

}  // namespace graphcheck
