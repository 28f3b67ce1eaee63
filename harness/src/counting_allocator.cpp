#include "counting_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace graphcheck {
namespace {
// SetCPUAllocator only replaces an allocator of lower or equal priority; installing and restoring
// at the same high priority always takes effect.
constexpr std::uint8_t kPriority = 200;
thread_local int t_uncounted = 0;
thread_local int t_direct_map = 0;
}  // namespace

UncountedScope::UncountedScope() { ++t_uncounted; }
UncountedScope::~UncountedScope() { --t_uncounted; }

DirectMapScope::DirectMapScope() {
  CountingCpuAllocator::instance().install();
  ++t_direct_map;
}
DirectMapScope::~DirectMapScope() {
  --t_direct_map;
  CountingCpuAllocator::instance().uninstall();
}

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
  c10::DataPtr owned;
  if (t_direct_map > 0 && n >= DirectMapScope::kDirectMapBytes) owned = map_block(n);
  if (!owned) owned = inner->allocate(n);
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

// Note [Directly mapped blocks]. Its context is its data, as every block of this allocator's
// (raw_deleter()); free_data() unmaps it.
c10::DataPtr CountingCpuAllocator::map_block(std::size_t n) {
  static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t length = (n + page - 1) / page * page;
  void* data = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) return {};  // the heap instead
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_mapped.emplace(data, length);
  }
  return c10::DataPtr(data, data, &CountingCpuAllocator::free_data, c10::Device(c10::DeviceType::CPU));
}

void CountingCpuAllocator::free_data(void* data) {
  CountingCpuAllocator& self = instance();
  c10::DataPtr owned;
  c10::Allocator* inner = nullptr;
  std::size_t mapped = 0;
  {
    std::lock_guard<std::mutex> lock(self.m_mutex);
    auto it = self.m_alive.find(data);
    if (it != self.m_alive.end()) {
      owned = std::move(it->second.inner);
      self.m_live -= static_cast<std::int64_t>(it->second.bytes);
      self.m_alive.erase(it);
    }
    if (auto m = self.m_mapped.find(data); m != self.m_mapped.end()) {
      mapped = m->second;
      self.m_mapped.erase(m);
      // A counted block's entry holds this same block: released here, not by its deleter.
      if (owned) (void)owned.release_context();
    } else if (!owned) {
      inner = self.m_inner;
    }
  }
  if (mapped) {
    ::munmap(data, mapped);
    return;
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

std::vector<std::pair<const void*, std::size_t>> CountingCpuAllocator::blocks_alive_since(std::uint64_t moment) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<std::pair<const void*, std::size_t>> out;
  for (const auto& [data, entry] : m_alive) {
    if (entry.serial > moment) out.emplace_back(data, entry.bytes);
  }
  return out;
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
