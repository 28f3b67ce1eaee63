// Torch-free reader and writer for the safetensors format.
//
// Layout of a file (the format of https://github.com/huggingface/safetensors):
//   bytes [0, 8)        N, the header size, a little-endian uint64
//   bytes [8, 8 + N)    the header: a UTF-8 JSON object, possibly padded with trailing spaces
//   bytes [8 + N, end)  the data section
// Each header key other than "__metadata__" names a tensor and maps to
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
// with offsets relative to the start of the data section. "__metadata__", when present, maps
// to an object of string -> string.
//
// See Note [Safetensors validation] in safetensors.cpp for the checks File::open performs. In
// short, it accepts what the reference implementation accepts (tensors packed back to back from
// offset 0 to the end of the file, no holes, no overlaps), and is stricter in three ways: it
// rejects duplicate keys and unknown keys inside a tensor entry (the reference silently ignores
// them), and dims above INT64_MAX.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace graphcheck::safetensors {

// Element types. Names follow the safetensors header spelling (dtype_name); E8M0 is spelled
// "F8_E8M0" in headers, as the reference implementation writes it.
enum class Dtype {
  F64,
  F32,
  F16,
  BF16,
  I64,
  I32,
  I16,
  I8,
  U64,
  U32,
  U16,
  U8,
  BOOL,
  F8_E4M3,
  F8_E5M2,
  E8M0
};

// Every Dtype, in declaration order.
[[nodiscard]] const std::vector<Dtype>& all_dtypes();

// The header spelling: "F32", "BF16", "F8_E4M3", "F8_E8M0" for E8M0.
[[nodiscard]] std::string_view dtype_name(Dtype dtype);

// Inverse of dtype_name (exact, case-sensitive match); nullopt for anything else.
[[nodiscard]] std::optional<Dtype> parse_dtype(std::string_view name);

// Bytes per element (BOOL and the 8-bit float types take one byte).
[[nodiscard]] std::size_t dtype_size(Dtype dtype);

// Element `i` of the little-endian data `data` of type `dtype` as text: "%g" for the float
// types (F16, BF16, the F8 kinds decoded exactly, E8M0 as a power of two), decimal for integers,
// true/false for BOOL. `data` must hold at least i + 1 elements.
[[nodiscard]] std::string value_string(const std::byte* data, Dtype dtype, std::int64_t i);

// `graphcheck inspect`: the file's tensors (name, dtype, shape, bytes, XXH3-64 fingerprint, the
// first `values` values) and its metadata, as text. Throws Error as File::open does.
[[nodiscard]] std::string inspect(const std::string& path, int values);

// Product of the dims, or nullopt when a dim is negative or the product overflows int64.
// An empty shape is a scalar (1 element); a 0 anywhere gives 0 elements.
[[nodiscard]] std::optional<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape);

// Thrown by File::open and write. Every message names the file and the problem and, where it
// helps, the tensor and what to do about it.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One tensor of an opened file, as declared by the header and validated by File::open.
struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets relative to the start of the data section
  std::uint64_t end = 0;

  [[nodiscard]] std::uint64_t nbytes() const { return end - begin; }
  // Number of elements (1 for a scalar). Throws Error when the shape is invalid, which cannot
  // happen for a TensorInfo that came from File.
  [[nodiscard]] std::int64_t numel() const;
};

// Note [Released pages]: drops from the process's resident set the pages of [data, data + bytes)
// that lie wholly inside it, where that range lies in a live map of File::open; they are read
// back from the file (the page cache, or the disk) the next time they are touched. A range that
// reaches the end of a map takes the map's last page whole (past the file's end it holds nothing
// else). No-op, and 0, for any other memory. What a copy_on_write map copied on a write to those
// pages is dropped with them and the file's bytes come back: the caller wants that (the
// stream-order pass, Note [Views streamed where nothing keeps them]) or vouches that nobody wrote
// there. Returns the bytes released.
std::size_t release_mapped_pages(const void* data, std::size_t bytes) noexcept;

// Note [Written pages of a map]: whether this process wrote into [data, data + bytes) through a
// copy_on_write map of File::open since the pages were mapped or last released, told by the
// kernel's page table (/proc/self/pagemap) instead of by reading the bytes: a write into a
// private file map copies the page it lands on, and the copy is anonymous memory where the
// page was the file's. At page granularity, so a write into the bytes beside the range, on a
// page they share, counts too.
//  - clean: no page of the range was written;
//  - written: some page was (or may have been: one the kernel swapped out);
//  - unknown: the range does not lie in one live map of File::open, or the page table cannot be
//    read here (a kernel without it, a sandbox that hides it). The caller reads the bytes instead.
// A write through some other map of the file (MAP_SHARED) changes the file's page itself and is
// not seen; nothing of graphcheck's makes one.
enum class PageWrites { clean, written, unknown };
// Whether [data, data + bytes) lies wholly inside one live map of File::open.
[[nodiscard]] bool lies_in_map(const void* data, std::size_t bytes) noexcept;
[[nodiscard]] PageWrites mapped_pages_written(const void* data, std::size_t bytes) noexcept;

// How File::open maps the file. read_only: a write through the map faults. copy_on_write: a
// private writable map (MAP_PRIVATE): a write copies the page it lands on, and reaches neither the
// file nor any other map of it (mutable_data()).
enum class Mapping { read_only, copy_on_write };

// A memory map (POSIX mmap) of a validated safetensors file, read-only unless opened with
// Mapping::copy_on_write, unmapped in the destructor. move-only.
//
// tensors() lists the tensors sorted by data offset (ties, which only zero-size tensors can have,
// broken by name), i.e. in the order their bytes appear in the file. This is the order the
// reference implementation validates in; it does not depend on the header's key order.
class File {
 public:
  struct Header;  // what the header gave (safetensors.cpp), shared by the Files opened on it

  // Maps and validates the file; throws Error naming the path and the problem. Anything that
  // is not a regular file (a directory, a FIFO, a device) is refused before it is opened.
  static File open(const std::string& path, Mapping mapping = Mapping::read_only);
  // Validates an in-memory image of a file, with the same checks as open(); the bytes are
  // copied. `name` stands for the path in messages and in path(). For tests and fuzzing.
  static File parse(std::span<const std::byte> bytes, const std::string& name);

  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  ~File();

  [[nodiscard]] const std::string& path() const { return m_path; }
  // tensors(), find()'s pointers and metadata() stay valid until this File is destroyed or
  // assigned to (a move from it carries them along).
  [[nodiscard]] const std::vector<TensorInfo>& tensors() const;
  // nullptr when no tensor has that name.
  [[nodiscard]] const TensorInfo* find(std::string_view name) const;
  // The "__metadata__" map; empty when the header has none.
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const;
  // Pointer to the tensor's first byte inside the map; valid while this File lives. The pointer
  // is only as aligned as the file makes it (files from write() keep every tensor aligned to its
  // element size; other writers may not): read through memcpy when in doubt. Throws Error when
  // info's byte range does not lie inside this file's data section.
  [[nodiscard]] const std::byte* data(const TensorInfo& info) const;
  // data() for writing: only for a map opened with Mapping::copy_on_write (and for parse()'s own
  // copy), so that the write stays private; throws Error otherwise.
  [[nodiscard]] std::byte* mutable_data(const TensorInfo& info);
  [[nodiscard]] bool writable() const { return m_writable; }
  [[nodiscard]] std::uint64_t file_size() const { return m_file_size; }
  // Size of the JSON header (N) and the offset of the data section (8 + N) in the file.
  [[nodiscard]] std::uint64_t header_size() const { return m_data_offset - 8; }
  [[nodiscard]] std::uint64_t data_offset() const { return m_data_offset; }

 private:
  File() = default;
  // Validates the image at m_map (m_file_size bytes) and fills the members below from it.
  void validate();
  // validate()'s parse and checks of the header text (Note [Validated headers]).
  void validate_header(const char* text, std::uint64_t header_size, std::uint64_t data_size,
                       Header& out) const;
  void release() noexcept;

  std::string m_path;
  std::vector<std::byte> m_owned;  // parse()'s copy of the bytes; empty for a mapped file
  // What the header gave: the tensors in data order, the index, the metadata. Shared, not
  // copied, with every File opened on the same header (Note [Validated headers]).
  std::shared_ptr<const Header> m_header;
  const std::byte* m_map = nullptr;  // the mmap (m_mapped) or m_owned.data()
  bool m_mapped = false;
  bool m_writable = false;  // a copy_on_write map, or parse()'s copy
  std::uint64_t m_file_size = 0;
  std::uint64_t m_data_offset = 0;
};

// A tensor to write: borrowed bytes, little-endian, contiguous.
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;
};

// Writes a safetensors file atomically: the bytes go to a temporary file in the same directory,
// which is then renamed over path, so readers never see a partial file.
//
// Checks, each an Error naming path and the tensor: names non-empty, unique and not
// "__metadata__"; dims non-negative; numel * dtype_size == nbytes without overflow; data non-null
// when nbytes > 0.
//
// Layout: metadata first in the header, then tensors in data order. The data is ordered by
// element size, largest first (stable: tensors of equal element size keep the caller's order),
// and the header is padded with spaces so that the data section starts 8-byte aligned; together
// these keep every tensor aligned to its element size in the file, as the reference writer does.
//
// Durability::durable fsyncs the data before the rename (a file meant to outlive a crash);
// Durability::scratch does not (the harness's generated checkpoints, rewritten on the next run):
// the rename still keeps readers from seeing a partial file.
enum class Durability { durable, scratch };
void write(const std::string& path, const std::vector<TensorView>& tensors,
           const std::map<std::string, std::string>& metadata = {},
           Durability durability = Durability::durable);

}  // namespace graphcheck::safetensors
