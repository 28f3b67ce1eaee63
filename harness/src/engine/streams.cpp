// RecordingStream's recording and its copy-on-need settlement after a load (engine/streams.h):
// the ledger model B is built from. The harness's copies are uncounted and their time is the
// harness's, not the model's.

#include "engine/streams.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>

#include "counting_allocator.h"
#include "engine/errors.h"
#include "fingerprint.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/safetensors.h"

namespace graphcheck::engine {

std::optional<NamedTensor> RecordingStream::next() {
  if (!m_copy) settle_pending();
  std::optional<NamedTensor> item;
  {
    // The checkpoint's tensors are the harness's memory, not the model's: the records keep them.
    UncountedScope uncounted;
    item = m_inner.next();
  }
  if (!item) release_pages();  // the stream has ended: what settled goes now, not at finish()
  if (item) {
    HarnessTime t(m_harness);
    UncountedScope uncounted;  // the harness's copy, not the model's memory
    Recorded r{{item->name, m_copy ? item->tensor.clone() : item->tensor}, 0, 0, 0, false};
    if (!m_copy && r.item.tensor.defined()) {
      r.version = version_of(r.item.tensor);
      // Note [Written pages of a map]: a view of a checkpoint's map needs no fingerprint (a read
      // of every byte at each load and again as it settles, 1.5 s of the 10,000-tensor scale
      // run's 24, issue 26): the page table says whether the loader wrote it.
      const torch::Tensor& t = r.item.tensor;
      if (t.device().is_cpu() && t.has_storage() && t.is_contiguous() && t.nbytes() > 0 &&
          safetensors::mapped_pages_written(t.data_ptr(), t.nbytes()) == safetensors::PageWrites::clean) {
        r.mapped = t.data_ptr();
        r.mapped_bytes = t.nbytes();
      } else {
        r.print = fingerprint(t);
      }
      // Other tensors on its storage now (the source's views, if any): a loader that keeps a view
      // or rebinds a parameter onto it (set_data) adds one.
      r.storage_refs = r.item.tensor.has_storage() ? r.item.tensor.storage().use_count() : 0;
    }
    if (!m_copy && r.item.tensor.defined()) m_pending.push_back(m_recorded.size());
    m_recorded.push_back(std::move(r));
    m_seen.insert(item->name);
  }
  return item;
}

bool RecordingStream::settle(Recorded& r, bool force) {
  torch::Tensor& tensor = r.item.tensor;
  // Kept: a handle to the same tensor besides ours (the loader stored the item, or still holds
  // it), or another tensor on its storage (a view, a parameter rebound onto it).
  const bool kept = tensor.use_count() > 1 || (tensor.has_storage() && tensor.storage().use_count() > r.storage_refs);
  if (kept && !force) return false;
  const bool written = written_since_streamed(r);
  const torch::Tensor before = tensor;
  if (written && m_reread) {
    tensor = m_reread(r.item.name);
  } else if (written || kept) {
    tensor = tensor.clone();
  }
  r.settled = true;
  // Note [Settled as the load goes]: a map's pages nobody holds any more (ours unwritten, or the
  // loader's written copies, now replaced) can go. A kept tensor's pages stay: the loader reads them.
  if (!force && before.device().is_cpu() && before.is_contiguous() && before.nbytes() > 0) {
    const auto begin = reinterpret_cast<std::uintptr_t>(before.data_ptr());
    if (begin != m_end || m_end - m_begin >= (std::uintptr_t{64} << 20)) {
      release_pages();
      m_begin = begin;
    }
    m_end = begin + before.nbytes();
  }
  return true;
}

bool RecordingStream::written_since_streamed(const Recorded& r) {
  const torch::Tensor& t = r.item.tensor;
  if (version_of(t) != r.version) return true;
  if (r.mapped == nullptr) return fingerprint(t) != r.print;
  // The loader may have pointed the tensor elsewhere (set_, resize_): then it changed.
  if (!t.has_storage() || t.data_ptr() != r.mapped || t.nbytes() != r.mapped_bytes || !t.is_contiguous()) return true;
  return safetensors::mapped_pages_written(r.mapped, r.mapped_bytes) != safetensors::PageWrites::clean;
}

void RecordingStream::settle_pending() {
  if (m_pending.empty()) return;
  HarnessTime t(m_harness);
  UncountedScope uncounted;
  std::vector<std::size_t> still;
  for (std::size_t i : m_pending) {
    if (settle(m_recorded[i], /*force=*/false)) {
      ++m_settled_early;
    } else {
      still.push_back(i);
    }
  }
  // A loader that keeps what it is streamed (to combine it later) settles in finish(): only the
  // last few records are looked at again, so that each next() costs O(1).
  constexpr std::size_t kWindow = 8;
  if (still.size() > kWindow) still.erase(still.begin(), still.end() - static_cast<std::ptrdiff_t>(kWindow));
  m_pending = std::move(still);
}

void RecordingStream::release_pages() {
  if (m_end > m_begin) (void)safetensors::release_mapped_pages(reinterpret_cast<const void*>(m_begin), m_end - m_begin);
  m_begin = m_end = 0;
}

std::vector<NamedTensor> RecordingStream::finish() {
  HarnessTime t(m_harness);
  UncountedScope uncounted;
  release_pages();
  m_pending.clear();
  std::vector<NamedTensor> streamed;
  streamed.reserve(m_recorded.size());
  for (Recorded& r : m_recorded) {
    torch::Tensor& tensor = r.item.tensor;
    if (!m_copy && tensor.defined() && !r.settled) (void)settle(r, /*force=*/true);
    m_into[r.item.name] = tensor;
    if (m_superseded) m_superseded->erase(r.item.name);
    streamed.push_back(std::move(r.item));
  }
  m_recorded.clear();
  m_reread = nullptr;  // every record is settled: its file goes now, not with the stream
  return streamed;
}

std::int64_t RecordingStream::version_of(const torch::Tensor& t) {
  try {
    return static_cast<std::int64_t>(t._version());
  } catch (const c10::Error&) {
    return -1;  // an inference tensor has no version counter: the fingerprint decides
  }
}

std::optional<NamedTensor> CloningStream::next() {
  auto item = m_inner.next();
  if (!item || !item->tensor.defined()) {
    if (!item) release();
    return item;
  }
  const torch::Tensor source = item->tensor;
  item->tensor = source.clone();
  if (source.device().is_cpu() && source.is_contiguous() && source.nbytes() > 0) {
    const auto begin = reinterpret_cast<std::uintptr_t>(source.data_ptr());
    const auto end = begin + source.nbytes();
    if (begin != m_end || m_end - m_begin >= (std::uintptr_t{64} << 20)) {
      release();
      m_begin = begin;
    }
    m_end = end;
  }
  return item;
}

void CloningStream::release() {
  if (m_end > m_begin) (void)safetensors::release_mapped_pages(reinterpret_cast<const void*>(m_begin), m_end - m_begin);
  m_begin = m_end = 0;
}

std::vector<NamedTensor> read_checkpoint_tensors(const std::string& path, const std::vector<std::string>& prefixes) {
  std::vector<NamedTensor> out;
  try {
    SafetensorsWeightStream stream(path, prefixes, {}, StreamReads::copies);
    while (auto item = stream.next()) out.push_back(std::move(*item));
  } catch (const safetensors::Error& e) {
    throw UserError(e.what());
  }
  return out;
}

namespace {

// The reread's open file, and the pages it has copied but not handed back yet: a run of
// neighbouring tensors goes back in one call, rounded outward, when the next tensor read lies
// elsewhere, at every 64 MiB, and when the reread goes. Released one tensor at a time, a tensor
// under a page gave back the page its neighbour was about to read, which faulted it in again:
// 1 KiB tensors took 14.4 us each to reread, against 8 when the pages stayed till the load's end.
class FileReread {
 public:
  explicit FileReread(std::string path) : m_path(std::move(path)), m_file(safetensors::File::open(m_path)) {}
  ~FileReread() { release(); }
  FileReread(const FileReread&) = delete;
  FileReread& operator=(const FileReread&) = delete;

  torch::Tensor read(const std::string& name) {
    const safetensors::TensorInfo* info = m_file.find(name);
    if (info == nullptr) throw std::logic_error(fmt::format("'{}' vanished from '{}'", name, m_path));
    torch::Tensor copy = read_tensor(m_file, *info);
    if (info->nbytes() > 0) {
      // The map is private and only read here, so whole pages go, those shared with a
      // neighbour too: a neighbour read later faults its page in again from the page cache.
      static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
      const auto begin = reinterpret_cast<std::uintptr_t>(m_file.data(*info));
      const std::uintptr_t first = begin / page * page;
      const std::uintptr_t last = (begin + info->nbytes() + page - 1) / page * page;
      if (first > m_end || last < m_begin || m_end - m_begin >= (std::uintptr_t{64} << 20)) {
        release();
        m_begin = first;
      }
      m_begin = std::min(m_begin, first);
      m_end = std::max(m_end, last);
    }
    return copy;
  }

 private:
  void release() noexcept {
    if (m_end > m_begin) (void)safetensors::release_mapped_pages(reinterpret_cast<const void*>(m_begin), m_end - m_begin);
    m_begin = m_end = 0;
  }

  std::string m_path;
  safetensors::File m_file;
  std::uintptr_t m_begin = 0, m_end = 0;  // copied pages not handed back yet
};

}  // namespace

RecordingStream::Reread reread_from_file(std::string path) {
  auto reread = std::make_shared<FileReread>(std::move(path));
  return [reread](const std::string& name) { return reread->read(name); };
}

}  // namespace graphcheck::engine
