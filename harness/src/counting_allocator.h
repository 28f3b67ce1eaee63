#pragma once
// A counting wrapper around libtorch's CPU allocator (c10::SetCPUAllocator): live bytes, peaks and
// which allocations made since a given moment are still alive. Process-wide by nature (the CPU
// allocator is), so one instance lives for the whole process; install() / uninstall() swap it in
// and out, and allocations made while it was installed are still counted when freed later.

#include <c10/core/Allocator.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace graphcheck {

// Allocations made on this thread while one lives bypass the counter: the harness's own
// bookkeeping (e.g. the weights model B is built from) is not the model's memory.
class UncountedScope {
 public:
  UncountedScope();
  ~UncountedScope();
  UncountedScope(const UncountedScope&) = delete;
  UncountedScope& operator=(const UncountedScope&) = delete;
};

// Note [Directly mapped blocks]: allocations of at least kDirectMapBytes made on this thread while
// one lives are mapped on their own (mmap) instead of taken from glibc's heap, so that freeing one
// returns its pages to the system at once. For model B's build (engine/models.cpp): a loader that
// replaces what its constructor allocated (a repack in load_weights() or PWAL) frees a model's
// worth of blocks in the middle of the heap, and glibc keeps those pages resident until the next
// malloc_trim: dsv4 32x1024's model B build held 266 MB (half the model) of freed pages at its end,
// the run's peak (bench/lifecycle_bench BM_PeakRss). Only for a scope: a mapping per large block
// everywhere made the whole dsv4 run 40% slower (its forwards' and clones' blocks, page faults on
// every reuse). The scope installs the counter as libtorch's CPU allocator for its lifetime.
class DirectMapScope {
 public:
  static constexpr std::size_t kDirectMapBytes = std::size_t{1} << 20;
  DirectMapScope();
  ~DirectMapScope();
  DirectMapScope(const DirectMapScope&) = delete;
  DirectMapScope& operator=(const DirectMapScope&) = delete;
};

class CountingCpuAllocator final : public c10::Allocator {
 public:
  static CountingCpuAllocator& instance();

  // Installs the counter as libtorch's CPU allocator, wrapping the one in place; uninstall()
  // restores it. Nests (a count).
  void install();
  void uninstall();

  c10::DataPtr allocate(std::size_t n) override;
  // Like the default CPU allocator, buffers are "simple" (context == data), so raw_allocate()
  // and raw_deallocate() (used e.g. by oneDNN) work.
  [[nodiscard]] c10::DeleterFnPtr raw_deleter() const override { return &free_data; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // A moment: allocations made after it are "since" it.
  [[nodiscard]] std::uint64_t now() const;
  [[nodiscard]] std::int64_t live_bytes() const;
  // Bytes of allocations made since `moment` that are still alive.
  [[nodiscard]] std::int64_t alive_since(std::uint64_t moment) const;
  // Those allocations one by one: (data pointer, bytes).
  [[nodiscard]] std::vector<std::pair<const void*, std::size_t>> blocks_alive_since(std::uint64_t moment) const;
  // Highest live_bytes() seen since the last reset_peak().
  [[nodiscard]] std::int64_t peak_bytes() const;
  void reset_peak();

 private:
  CountingCpuAllocator() = default;
  struct Entry {
    c10::DataPtr inner;  // owns the memory, freed through the wrapped allocator
    std::size_t bytes = 0;
    std::uint64_t serial = 0;
  };
  static void free_data(void* data);
  // A block of Note [Directly mapped blocks], or an empty DataPtr where the mapping failed.
  c10::DataPtr map_block(std::size_t n);

  mutable std::mutex m_mutex;
  c10::Allocator* m_inner = nullptr;
  int m_installs = 0;
  std::uint64_t m_serial = 0;
  std::int64_t m_live = 0;
  std::int64_t m_peak = 0;
  std::unordered_map<void*, Entry> m_alive;  // data pointer -> allocation
  std::unordered_map<void*, std::size_t> m_mapped;  // directly mapped block -> its mapped length
};

}  // namespace graphcheck
