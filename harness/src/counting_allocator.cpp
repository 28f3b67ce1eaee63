#include "counting_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <cstring>

namespace graphcheck {
namespace {
// SetCPUAllocator only replaces an allocator of lower or equal priority; installing and restoring
// at the same high priority always takes effect.
constexpr std::uint8_t kPriority = 200;
}  // namespace

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
  auto* ctx = new Context{inner->allocate(n), n, 0};
  void* data = ctx->inner.get();
  const c10::Device device = ctx->inner.device();
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    ctx->serial = ++m_serial;
    m_alive.emplace(ctx, ctx->serial);
    m_live += static_cast<std::int64_t>(n);
    if (m_live > m_peak) m_peak = m_live;
  }
  return c10::DataPtr(data, ctx, &CountingCpuAllocator::free_context, device);
}

void CountingCpuAllocator::free_context(void* raw) {
  auto* ctx = static_cast<Context*>(raw);
  CountingCpuAllocator& self = instance();
  {
    std::lock_guard<std::mutex> lock(self.m_mutex);
    self.m_alive.erase(ctx);
    self.m_live -= static_cast<std::int64_t>(ctx->bytes);
  }
  delete ctx;  // frees through the wrapped allocator's own deleter
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
  for (const auto& [ctx, serial] : m_alive) {
    if (serial > moment) bytes += static_cast<std::int64_t>(ctx->bytes);
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
