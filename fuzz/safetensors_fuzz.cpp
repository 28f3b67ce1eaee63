// libFuzzer target: the safetensors reader (File::parse, the in-memory twin of File::open).
// Any input must either parse into tensors whose byte ranges lie inside the image or raise
// safetensors::Error; anything else (a crash, a sanitizer report, another exception, a leak, a
// hang) is a finding. Built by fuzz/CMakeLists.txt, run by ci/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "graphcheck/safetensors.h"

namespace st = graphcheck::safetensors;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  try {
    const st::File file = st::File::parse(bytes, "fuzz.safetensors");
    std::uint64_t checksum = 0;
    std::uint64_t covered = 0;
    for (const st::TensorInfo& info : file.tensors()) {
      // Validated files hold tensors packed back to back inside the data section.
      if (info.begin != covered || info.end < info.begin) __builtin_trap();
      covered = info.end;
      const std::int64_t numel = info.numel();
      if (static_cast<std::uint64_t>(numel) * st::dtype_size(info.dtype) != info.nbytes()) {
        __builtin_trap();
      }
      const std::byte* p = file.data(info);
      // Touch the first and last byte: ASan flags a range outside the copied image.
      if (info.nbytes() > 0) {
        checksum += std::to_integer<std::uint64_t>(p[0]);
        checksum += std::to_integer<std::uint64_t>(p[info.nbytes() - 1]);
      }
      if (file.find(info.name) == nullptr) __builtin_trap();
    }
    if (covered != file.file_size() - file.data_offset()) __builtin_trap();
    for (const auto& [key, value] : file.metadata()) checksum += key.size() + value.size();
    volatile std::uint64_t sink = checksum;
    (void)sink;
  } catch (const st::Error&) {
    // A rejected file: the expected outcome for most inputs.
  }
  return 0;
}
