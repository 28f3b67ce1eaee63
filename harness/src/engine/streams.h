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
//
// Note [Settled as the load goes]: a record the loader no longer holds (it copied the tensor into
// its parameter and dropped it) can be settled when the next tensors are asked for, before the
// load ends: nobody can write to it or keep it any more. A settled view of a generated
// checkpoint's map then leaves the resident set at once (Note [Released pages]), so that a load
// never holds the whole checkpoint's pages beside the model; the pages a loader wrote (copied on
// write) go too, once the record holds a fresh read. Records still held settle in finish().
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
  // The records settled before the load ended (Note [Settled as the load goes]), for tests.
  [[nodiscard]] std::size_t settled_early() const { return m_settled_early; }

 private:
  struct Recorded {
    NamedTensor item;
    std::int64_t version = 0;
    std::uint64_t print = 0;
    std::size_t storage_refs = 0;
    bool settled = false;
    // Note [Written pages of a map]: the bytes lie in a checkpoint's copy-on-write map whose pages
    // were clean when streamed; the page table tells a write, and `print` is not taken.
    const void* mapped = nullptr;
    std::size_t mapped_bytes = 0;
  };
  // Whether r's tensor was written since it was streamed (its version, its map's pages or its bytes).
  static bool written_since_streamed(const Recorded& r);
  static std::int64_t version_of(const torch::Tensor& t);
  // Settles r unless someone besides the record holds it (or `force`): a fresh read or a copy
  // where the loader wrote or kept it. Returns whether it settled.
  bool settle(Recorded& r, bool force);
  // Note [Settled as the load goes]: the records of the last few next() calls, settled where
  // the loader has let them go, their pages released.
  void settle_pending();
  void release_pages();
  std::vector<std::size_t> m_pending;             // indices into m_recorded, not settled yet
  std::uintptr_t m_begin = 0, m_end = 0;          // settled map bytes not released yet
  std::size_t m_settled_early = 0;
  WeightStream& m_inner;
  std::map<std::string, torch::Tensor>& m_into;
  double& m_harness;
  bool m_copy;
  Reread m_reread;
  std::map<std::string, torch::Tensor>* m_superseded;
  std::vector<Recorded> m_recorded;
  std::set<std::string> m_seen;
};

// A RecordingStream's reread of a safetensors file: the named tensor, a fresh copy of the file's
// bytes. The file is opened here, beside the stream's own open at the start of the load, and kept
// for every call, so that a loader that writes every tensor it is streamed costs one open per
// load, not one per tensor (an open per tensor, each copying or parsing a header of n tensors,
// made such a load quadratic: 2,000 tensors 0.4 s, 4,000 2.0 s). What it serves is the file as it
// was when the load began. The map is private and only read: the pages of a run of neighbouring
// tensors, those shared with a tensor outside the run too, go back to the page cache once the run
// is copied, at the latest every 64 MiB and when the reread goes (Note [Released pages]).
// Throws safetensors::Error where the file cannot be opened.
RecordingStream::Reread reread_from_file(std::string path);

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
