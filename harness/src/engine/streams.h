#pragma once
// The weight-stream wrappers of the driver: RecordingStream keeps the ledger of what model A
// should hold (every tensor a load streamed, by checkpoint name), CloningStream feeds model B
// copies of that ledger. Internal to the driver (harness/src/engine/).

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graphcheck/model.h"

namespace graphcheck::engine {

// Remembers every tensor a stream yields (by checkpoint name): the weights model A should hold
// afterwards. A stream that yields fresh tensors (a checkpoint file) is recorded without a copy:
// finish() checks each one after the load and takes a copy only where needed (copy-on-need): a
// fresh read from the source where the loader wrote into the streamed tensor (its version counter
// or its content moved), a clone where the loader kept a reference to it (a later PWAL could write
// into it). A stream of tensors the harness holds elsewhere (`copy`) is cloned as it streams.
class RecordingStream final : public WeightStream {
 public:
  using Reread = std::function<torch::Tensor(const std::string&)>;
  // `superseded`: records the new ones replace (a refit's names win over the initial load's, so
  // the initial record of a name a refit streamed is never read again and is dropped).
  RecordingStream(WeightStream& inner, std::map<std::string, torch::Tensor>& into, double& harness, bool copy,
                  Reread reread = {}, std::map<std::string, torch::Tensor>* superseded = nullptr)
      : m_inner(inner), m_into(into), m_harness(harness), m_copy(copy), m_reread(std::move(reread)),
        m_superseded(superseded) {}
  std::optional<NamedTensor> next() override;
  [[nodiscard]] std::string source() const override { return m_inner.source(); }
  [[nodiscard]] const std::set<std::string>& seen() const { return m_seen; }

  // After load_weights() returned: settles the records (see above) and returns them in stream order.
  std::vector<NamedTensor> finish();

 private:
  struct Recorded {
    NamedTensor item;
    std::int64_t version = 0;
    std::uint64_t print = 0;
    std::size_t storage_refs = 0;
  };
  static std::int64_t version_of(const torch::Tensor& t);
  WeightStream& m_inner;
  std::map<std::string, torch::Tensor>& m_into;
  double& m_harness;
  bool m_copy;
  Reread m_reread;
  std::map<std::string, torch::Tensor>* m_superseded;
  std::vector<Recorded> m_recorded;
  std::set<std::string> m_seen;
};

// Yields a clone of each tensor of another stream, made as it is asked for. The pages of a source
// tensor that is a view of a checkpoint's map leave the resident set once it is cloned (Note
// [Released pages]): the sources are the harness's read-only records, and a model B built from a
// mapped ledger then never holds the ledger's pages and its own copy at once. Adjacent sources
// are released in one call, at least every 64 MiB.
class CloningStream final : public WeightStream {
 public:
  explicit CloningStream(WeightStream& inner) : m_inner(inner) {}
  ~CloningStream() override { release(); }
  CloningStream(const CloningStream&) = delete;
  CloningStream& operator=(const CloningStream&) = delete;
  std::optional<NamedTensor> next() override;
  [[nodiscard]] std::string source() const override { return m_inner.source(); }

 private:
  void release();
  WeightStream& m_inner;
  std::uintptr_t m_begin = 0, m_end = 0;  // the sources cloned since the last release
};

// Every tensor of a checkpoint file whose name has one of `prefixes` (all when empty), in the
// file's order, each a copy; a bad file is a UserError.
[[nodiscard]] std::vector<NamedTensor> read_checkpoint_tensors(const std::string& path,
                                                               const std::vector<std::string>& prefixes = {});

}  // namespace graphcheck::engine
