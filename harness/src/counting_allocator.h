#pragma once
// A counting wrapper around libtorch's CPU allocator (c10::SetCPUAllocator): live bytes, peaks and
// which allocations made since a given moment are still alive. Process-wide by nature (the CPU
// allocator is), so one instance lives for the whole process; install() / uninstall() swap it in
// and out, and allocations made while it was installed are still counted when freed later.

#include <c10/core/Allocator.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

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

  mutable std::mutex m_mutex;
  c10::Allocator* m_inner = nullptr;
  int m_installs = 0;
  std::uint64_t m_serial = 0;
  std::int64_t m_live = 0;
  std::int64_t m_peak = 0;
  std::unordered_map<void*, Entry> m_alive;  // data pointer -> allocation
};

}  // namespace graphcheck
