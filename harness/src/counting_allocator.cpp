#include "counting_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <cstring>

namespace graphcheck {
namespace {
// SetCPUAllocator only replaces an allocator of lower or equal priority; installing and restoring
// at the same high priority always takes effect.
constexpr std::uint8_t kPriority = 200;
thread_local int t_uncounted = 0;
}  // namespace

UncountedScope::UncountedScope() { ++t_uncounted; }
UncountedScope::~UncountedScope() { --t_uncounted; }

CountingCpuAllocator& CountingCpuAllocator::instance() {
  static auto* allocator = new CountingCpuAllocator();  // never destroyed: late frees still count
  return *allocator;
}

void CountingCpuAllocator::install() {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_installs++ > 0) return;
  m_inner = c10::GetCPUAllocator();
  c10::SetCPUAllocator(this, kPriority);
}

void CountingCpuAllocator::uninstall() {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_installs == 0 || --m_installs > 0) return;
  c10::SetCPUAllocator(m_inner, kPriority);
}

c10::DataPtr CountingCpuAllocator::allocate(std::size_t n) {
  c10::Allocator* inner;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    inner = m_inner;
  }
  c10::DataPtr owned = inner->allocate(n);
  if (t_uncounted > 0) return owned;
  void* data = owned.get();
  const c10::Device device = owned.device();
  if (data == nullptr) return owned;  // zero-byte allocations: nothing to count
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    const std::uint64_t serial = ++m_serial;
    m_alive.emplace(data, Entry{std::move(owned), n, serial});
    m_live += static_cast<std::int64_t>(n);
    if (m_live > m_peak) m_peak = m_live;
  }
  return c10::DataPtr(data, data, &CountingCpuAllocator::free_data, device);
}

void CountingCpuAllocator::free_data(void* data) {
  CountingCpuAllocator& self = instance();
  c10::DataPtr owned;
  c10::Allocator* inner = nullptr;
  {
    std::lock_guard<std::mutex> lock(self.m_mutex);
    auto it = self.m_alive.find(data);
    if (it != self.m_alive.end()) {
      owned = std::move(it->second.inner);
      self.m_live -= static_cast<std::int64_t>(it->second.bytes);
      self.m_alive.erase(it);
    } else {
      inner = self.m_inner;
    }
  }
  if (inner) {
    // Raw-allocated by the wrapped allocator before the counter was installed.
    c10::DeleterFnPtr deleter = inner->raw_deleter();
    if (deleter) deleter(data);
  }
  // `owned` frees the memory through the wrapped allocator's own deleter here.
}

void CountingCpuAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count) std::memcpy(dest, src, count);
}

std::uint64_t CountingCpuAllocator::now() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_serial;
}

std::int64_t CountingCpuAllocator::live_bytes() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_live;
}

std::int64_t CountingCpuAllocator::alive_since(std::uint64_t moment) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::int64_t bytes = 0;
  for (const auto& [data, entry] : m_alive) {
    if (entry.serial > moment) bytes += static_cast<std::int64_t>(entry.bytes);
  }
  return bytes;
}

std::int64_t CountingCpuAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_peak;
}

void CountingCpuAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_peak = m_live;
}

}  // namespace graphcheck
