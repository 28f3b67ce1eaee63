// transfer: on a rollout rank of a distributed scenario, every refit arrives as the trainer sent
// it (Note [Distributed scenarios], engine/distributed.cpp). After each refit the trainer sends
// its manifest (finish_weight_update: each tensor's name, fingerprint and bucket); a tensor that
// arrived with other bytes, one that never arrived, and one the trainer never sent are findings
// naming the tensor and the bucket it travelled in: the producer and the consumer disagree on the
// packing (bucket boundaries, alignment padding) or on what is sent. A refit announced in the
// kernel format (is_checkpoint_format false) whose names are no live tensor's is one too: the
// trainer streams checkpoint-format names to a rank that copies kernel-format ones.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/probe.h"

namespace graphcheck {
namespace {

class TransferProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "transfer"; }

  void on_transfer_checked(RunContext& ctx, const TransferEvent& e) override {
    std::vector<std::string> differ, missing, buckets;
    std::set<std::string> sent_names;
    const std::set<std::string> unread(e.unread.begin(), e.unread.end());
    for (const SentTensor& s : e.sent) {
      sent_names.insert(s.name);
      if (unread.count(s.name)) continue;  // arrived; the loader never read it (below)
      auto it = e.received.find(s.name);
      if (it == e.received.end()) {
        missing.push_back(s.name);
      } else if (it->second != s.fingerprint) {
        differ.push_back(s.name);
        if (!s.bucket.empty() && std::find(buckets.begin(), buckets.end(), s.bucket) == buckets.end()) {
          buckets.push_back(s.bucket);
        }
      }
    }
    std::vector<std::string> extra;
    for (const auto& [name, fp] : e.received) {
      if (!sent_names.count(name)) extra.push_back(name);
    }
    ctx.measure(e, "gc/transfer/tensors_sent", static_cast<double>(e.sent.size()), "tensors");
    ctx.measure(e, "gc/transfer/tensors_differing", static_cast<double>(differ.size()), "tensors");
    const auto bucket_of = [&](const std::string& name) {
      for (const SentTensor& s : e.sent) {
        if (s.name == name) return s.bucket;
      }
      return std::string();
    };
    if (!differ.empty()) {
      const std::string first_bucket = bucket_of(differ.front());
      ctx.fail(name(), e, differ.front(),
               fmt::format("{} of {} tensors arrived with other bytes than the trainer sent in {} (first: '{}'{}): {}; "
                           "the producer and the consumer disagree on how the tensors are packed (bucket "
                           "boundaries, alignment padding, dtype or shape): size the buckets on one side and send "
                           "the layout, or compute it from the same inputs on both",
                           differ.size(), e.sent.size(), e.source, differ.front(),
                           first_bucket.empty() ? "" : fmt::format(", {}", first_bucket), listed(differ)),
               {{"tensor", differ.front()},
                {"tensors", fmt::format("{}", fmt::join(differ, "; "))},
                {"buckets", fmt::format("{}", fmt::join(buckets, "; "))},
                {"transfer", e.source}});
    }
    if (!missing.empty() || !extra.empty()) {
      const std::string& subject = missing.empty() ? extra.front() : missing.front();
      ctx.fail(name(), e, subject,
               fmt::format("{}: the trainer's manifest and what arrived disagree: {}{}{}; every tensor the trainer "
                           "announces must arrive once, and nothing else",
                           e.source, missing.empty() ? "" : fmt::format("sent, never arrived: {}", listed(missing)),
                           !missing.empty() && !extra.empty() ? "; " : "",
                           extra.empty() ? "" : fmt::format("arrived, never sent: {}", listed(extra))),
               {{"tensor", subject}, {"missing", fmt::format("{}", fmt::join(missing, "; "))},
                {"unannounced", fmt::format("{}", fmt::join(extra, "; "))}});
    }
    if (!e.unread.empty()) {
      ctx.fail(name(), e, e.unread.front(),
               fmt::format("{}: load_weights() returned before the stream ended, and {} tensor{} the trainer sent were "
                           "never read: {}; a loader reads every tensor it is given (what it does not read is silently "
                           "dropped: the weights stay stale)",
                           e.source, e.unread.size(), e.unread.size() == 1 ? "" : "s", listed(e.unread)),
               {{"tensor", e.unread.front()}, {"unread", fmt::format("{}", fmt::join(e.unread, "; "))}});
    }
    if (!e.unknown_kernel_names.empty()) {
      ctx.fail(name(), e, e.unknown_kernel_names.front(),
               fmt::format("{} came in the kernel format (is_checkpoint_format false), so its tensors are copied into "
                           "the live tensors of their names without load_weights() and without PWAL, but {} of them "
                           "name no live tensor: {}; the trainer streams checkpoint-format names: send "
                           "is_checkpoint_format true (the rank then loads them and runs PWAL), or convert them to "
                           "the kernel layout first",
                           e.source, e.unknown_kernel_names.size(), listed(e.unknown_kernel_names)),
               {{"tensor", e.unknown_kernel_names.front()},
                {"is_checkpoint_format", "false"},
                {"unknown_names", fmt::format("{}", fmt::join(e.unknown_kernel_names, "; "))}});
    }
    if (!e.kernel_shape_mismatches.empty()) {
      const std::string& first = e.kernel_shape_mismatches.front();
      ctx.fail(name(), e, first.substr(0, first.find(' ')),
               fmt::format("{} came in the kernel format (is_checkpoint_format false), but {} of its tensors do not "
                           "have the shape of the live tensor of their name: {}; a kernel-format refit sends each "
                           "rank its own shard in the live layout (full or checkpoint-layout tensors go with "
                           "is_checkpoint_format true)",
                           e.source, e.kernel_shape_mismatches.size(), listed(e.kernel_shape_mismatches)),
               {{"tensor", first.substr(0, first.find(' '))},
                {"is_checkpoint_format", "false"},
                {"shape_mismatches", fmt::format("{}", fmt::join(e.kernel_shape_mismatches, "; "))}});
    }
  }

 private:
  static std::string listed(const std::vector<std::string>& names) {
    constexpr std::size_t kShown = 6;
    if (names.size() <= kShown) return fmt::format("{}", fmt::join(names, ", "));
    return fmt::format("{} and {} more", fmt::join(names.begin(), names.begin() + kShown, ", "), names.size() - kShown);
  }
};

// Cross-rank checks (replicated tensors bit-identical, the same hooks on every rank) are made when
// the ranks' records are merged (session::merge_ranks); registered so that scenarios can name it.
class RanksProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "ranks"; }
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE_IN("transfer",
                             "distributed: every refit arrives on each rank as the trainer sent it (its manifest's "
                             "fingerprints), in the format it announced",
                             TransferProbe, ::graphcheck::Pass::observe);
GRAPHCHECK_REGISTER_PROBE_IN("ranks",
                             "distributed: tensors declared replicated are bit-identical on every rank after every "
                             "load, and every rank ran the same hooks (checked when the ranks' records merge)",
                             RanksProbe, ::graphcheck::Pass::observe);

}  // namespace graphcheck
