// The safetensors reader: the dtype table, header validation (Note [Safetensors validation]) and
// File, which maps a file or copies an image and checks it. The writer is safetensors_write.cpp.
// Torch-free.

#include "graphcheck/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "formats/safetensors_detail.h"
#include "regular_file.h"

// Note [Safetensors validation]
// File::open rejects, each with an Error that names the file:
//   - anything that is not a regular file (directory, FIFO, socket, device), before opening it
//     (see Note [Special files are refused before open] in regular_file.h);
//   - files shorter than the 8-byte size prefix (truncated);
//   - a header size over k_max_header_size (the reference's own cap, 100 MB) or past the end of
//     the file, checked against the file size before anything is read or allocated: nothing is
//     allocated in proportion to a number read from the file before it is validated;
//   - a header that is not valid UTF-8 JSON, holds a NUL byte, nests deeper than 128 levels (as
//     serde_json, which the reference uses), is not an object, or repeats a key at any level;
//   - "__metadata__" that is not an object of strings (null is accepted as "no metadata", as the
//     reference does);
//   - tensor entries that are not objects, miss or add keys besides dtype/shape/data_offsets, or
//     hold values of the wrong type;
//   - unknown dtypes, negative dims, shapes whose element or byte count overflows;
//   - begin > end, end past the data section, end - begin != numel * dtype_size;
//   - tensors that overlap, holes between tensors, and data bytes after the last tensor.
// The last point matches the reference implementation, which sorts tensors by data_offsets and
// requires each to begin exactly where the previous one ended, the first at 0 and the last to end
// at the end of the file. Because of that, no valid file has padding between tensors; writers
// keep tensors aligned by ordering them instead (see write(), safetensors_write.cpp).
//
// The reference ignores unknown keys inside a tensor entry and, for tensor names, keeps the last
// of duplicated keys; graphcheck rejects both, since either means the writer was confused. It also
// rejects dims above INT64_MAX (shapes are int64 here), which the reference would accept only
// alongside a 0 dim. A randomized differential run (mutated headers of the reference folder's
// overall.safetensors, checked against safetensors 0.8.0's deserialize) found no other
// disagreement.

namespace graphcheck::safetensors {

using detail::fail;
using detail::format_shape;
using detail::k_metadata_key;
using detail::tensor_label;

namespace {

constexpr std::uint64_t k_prefix_size = 8;
constexpr std::uint64_t k_max_header_size = 100'000'000;
constexpr int k_max_nesting = 128;

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  std::size_t size;
};

constexpr DtypeEntry k_dtypes[] = {
    {Dtype::F64, "F64", 8},      {Dtype::F32, "F32", 4},         {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2},    {Dtype::I64, "I64", 8},         {Dtype::I32, "I32", 4},
    {Dtype::I16, "I16", 2},      {Dtype::I8, "I8", 1},           {Dtype::U64, "U64", 8},
    {Dtype::U32, "U32", 4},      {Dtype::U16, "U16", 2},         {Dtype::U8, "U8", 1},
    {Dtype::BOOL, "BOOL", 1},    {Dtype::F8_E4M3, "F8_E4M3", 1}, {Dtype::F8_E5M2, "F8_E5M2", 1},
    {Dtype::E8M0, "F8_E8M0", 1},
};

const DtypeEntry& entry_of(Dtype dtype) {
  for (const DtypeEntry& entry : k_dtypes) {
    if (entry.dtype == dtype) return entry;
  }
  throw Error("safetensors: invalid Dtype value " + std::to_string(static_cast<int>(dtype)));
}

std::string known_dtype_list() {
  std::string out;
  for (const DtypeEntry& entry : k_dtypes) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

// A JSON value for an error message, cut short when long.
std::string excerpt(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr std::size_t k_max = 160;
  if (text.size() > k_max) text = text.substr(0, k_max) + "...";
  return text;
}

// A JSON value's type with its article: "an array", "a string".
std::string a_type(const nlohmann::json& value) {
  const std::string name = value.type_name();
  return (name == "array" || name == "object" ? "an " : "a ") + name;
}

// Every file starts with the 8-byte header size.
void check_prefix(const std::string& path, std::uint64_t size) {
  if (size < k_prefix_size) {
    fail(path, "file is " + std::to_string(size) +
                   " bytes, shorter than the 8-byte header-size prefix: it is truncated or not a "
                   "safetensors file");
  }
}

std::string errno_text(int err) { return std::strerror(err); }

std::uint64_t read_le64(const std::byte* p) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | std::to_integer<std::uint64_t>(p[i]);
  return value;
}

// Headers are read into nlohmann::json, whose objects are std::maps: ordered_json's objects are
// vectors searched linearly on every insertion, so a header of n keys would take O(n^2) time to
// parse (hours for a 100 MB header of short keys). Only the writer needs the header's order.
using Json = nlohmann::json;

// Finds the first key that appears twice in one object, at any nesting level (nlohmann keeps the
// last silently). A SAX pass rather than a parser callback: nlohmann's callback parser scans the
// whole enclosing object for discarded values each time an object ends, O(n^2) for n tensors.
class DuplicateKeyFinder : public nlohmann::json_sax<Json> {
 public:
  // Empty when every key is unique; otherwise the problem, for a message.
  [[nodiscard]] const std::string& duplicate() const { return m_duplicate; }

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    m_keys.emplace_back();
    return true;
  }
  bool key(string_t& name) override {
    // m_keys.size() is the nesting level of this object: 1 for the header, 2 for an entry.
    if (!m_keys.back().insert(name).second) {
      if (m_keys.size() == 1 && name != k_metadata_key) {
        m_duplicate = tensor_label(name) + " is declared twice in the header (duplicate name)";
      } else {
        m_duplicate = "key '" + name + "' appears twice in one object of the header (duplicate key)";
      }
      return false;  // stop at the first
    }
    return true;
  }
  bool end_object() override {
    m_keys.pop_back();
    return true;
  }
  // Arrays hold no keys; an object inside one starts its own key set.
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;  // the DOM parse, which ran first, reports syntax errors
  }

 private:
  std::vector<std::set<std::string>> m_keys;  // keys seen in each open object, outermost first
  std::string m_duplicate;
};

// Parses the header text, rejecting duplicate keys at any nesting level.
Json parse_header(const std::string& path, const char* begin, const char* end) {
  // nlohmann's lexer stops at a NUL byte as if the input ended there; JSON text never holds a raw
  // NUL, and the reference rejects NUL padding, so catch it first.
  if (const void* nul = std::memchr(begin, '\0', static_cast<std::size_t>(end - begin))) {
    fail(path, "header is not valid JSON: NUL byte at header offset " +
                   std::to_string(static_cast<const char*>(nul) - begin) +
                   " (headers are padded with spaces, never NULs): the file is corrupt or not a "
                   "safetensors file");
  }
  // serde_json, which the reference uses, refuses nesting deeper than 128 levels. Check that
  // before parsing: nlohmann would build a DOM (and this function a key set) for every level.
  int nesting = 0;
  bool in_string = false;
  for (const char* p = begin; p != end; ++p) {
    if (in_string) {
      if (*p == '\\') {
        if (p + 1 != end) ++p;
      } else if (*p == '"') {
        in_string = false;
      }
    } else if (*p == '"') {
      in_string = true;
    } else if (*p == '{' || *p == '[') {
      if (++nesting > k_max_nesting) {
        fail(path, "header nests objects/arrays deeper than " + std::to_string(k_max_nesting) +
                       " levels (a valid header needs 3): the file is corrupt or not a "
                       "safetensors file");
      }
    } else if (*p == '}' || *p == ']') {
      --nesting;
    }
  }
  Json header;
  try {
    header = Json::parse(begin, end);
  } catch (const nlohmann::json::exception& e) {
    fail(path, "header is not valid JSON (" + std::string(e.what()) +
                   "): the file is corrupt or not a safetensors file");
  }
  DuplicateKeyFinder finder;
  (void)Json::sax_parse(begin, end, &finder);
  if (!finder.duplicate().empty()) {
    fail(path, finder.duplicate() + ": every key may appear once; rewrite the file with unique names");
  }
  return header;
}

void parse_metadata(const std::string& path, const Json& value,
                    std::map<std::string, std::string>& out) {
  if (value.is_null()) return;  // the reference accepts null as "no metadata"
  if (!value.is_object()) {
    fail(path, "\"__metadata__\" must be an object of string -> string, got " +
                   a_type(value) + ": " + excerpt(value));
  }
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      fail(path, "\"__metadata__\" entry '" + key + "' has a non-string metadata value (" +
                     a_type(item) + ": " + excerpt(item) +
                     "); metadata values must be strings");
    }
    out.emplace(key, item.get<std::string>());
  }
}

TensorInfo parse_entry(const std::string& path, const std::string& name, const Json& entry,
                       std::uint64_t data_size) {
  const std::string label = tensor_label(name);
  if (!entry.is_object()) {
    fail(path,
         label + ": header entry is not an object but " + a_type(entry) + " (" +
             excerpt(entry) +
             "); expected {\"dtype\": ..., \"shape\": [...], \"data_offsets\": [begin, end]}");
  }
  for (const auto& [key, item] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      fail(path, label + ": unexpected key '" + key +
                     "' in header entry; only dtype, shape and data_offsets are allowed");
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) {
      fail(path, label + ": header entry is missing key '" + key + "' (" + excerpt(entry) + ")");
    }
  }

  TensorInfo info;
  info.name = name;

  const Json& dtype = entry["dtype"];
  if (!dtype.is_string()) {
    fail(path, label + ": \"dtype\" must be a string, got " + excerpt(dtype));
  }
  const auto parsed = parse_dtype(dtype.get<std::string>());
  if (!parsed) {
    fail(path, label + ": unknown dtype '" + dtype.get<std::string>() + "'; known dtypes are " +
                   known_dtype_list());
  }
  info.dtype = *parsed;

  const Json& shape = entry["shape"];
  if (!shape.is_array()) {
    fail(path,
         label + ": \"shape\" must be an array of non-negative integers, got " + excerpt(shape));
  }
  for (const Json& dim : shape) {
    if (dim.is_number_unsigned()) {
      const auto value = dim.get<std::uint64_t>();
      if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail(path, label + ": shape " + excerpt(shape) + " has a dim too large for int64 " +
                       "(shape product overflow)");
      }
      info.shape.push_back(static_cast<std::int64_t>(value));
    } else if (dim.is_number_integer()) {
      fail(path, label + ": shape " + excerpt(shape) + " has a negative dim " +
                     std::to_string(dim.get<std::int64_t>()) + "; dims must be >= 0");
    } else {
      fail(path,
           label + ": \"shape\" must be an array of non-negative integers, got " + excerpt(shape));
    }
  }

  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_integer() ||
      !offsets[1].is_number_integer()) {
    fail(path, label + ": \"data_offsets\" must be an array of two non-negative integers " +
                   "[begin, end], got " + excerpt(offsets));
  }
  if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    fail(path, label + ": \"data_offsets\" " + excerpt(offsets) + " holds a negative offset");
  }
  info.begin = offsets[0].get<std::uint64_t>();
  info.end = offsets[1].get<std::uint64_t>();

  const auto numel = checked_numel(info.shape);
  std::uint64_t expected = 0;
  if (!numel ||
      __builtin_mul_overflow(static_cast<std::uint64_t>(*numel),
                             static_cast<std::uint64_t>(dtype_size(info.dtype)), &expected)) {
    fail(path,
         label + ": shape " + format_shape(info.shape) + " of " +
             std::string(dtype_name(info.dtype)) +
             " has an element count or byte size too large for 64-bit arithmetic (shape product "
             "overflow); the header is corrupt");
  }
  const std::string range =
      "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "]";
  if (info.begin > info.end) {
    fail(path, label + ": " + range + " are reversed (begin > end)");
  }
  if (info.end - info.begin != expected) {
    fail(path, label + ": shape/byte-size mismatch: shape " + format_shape(info.shape) + " of " +
                   std::string(dtype_name(info.dtype)) + " needs " + std::to_string(expected) +
                   " bytes but " + range + " span " + std::to_string(info.end - info.begin) +
                   " bytes");
  }
  if (info.end > data_size) {
    fail(path, label + ": " + range + " are out of range: the data section holds only " +
                   std::to_string(data_size) +
                   " bytes; the file is most likely truncated (an interrupted write or copy), " +
                   "so write or copy it again");
  }
  return info;
}

}  // namespace

const std::vector<Dtype>& all_dtypes() {
  static const std::vector<Dtype> dtypes = [] {
    std::vector<Dtype> out;
    for (const DtypeEntry& entry : k_dtypes) out.push_back(entry.dtype);
    return out;
  }();
  return dtypes;
}

std::string_view dtype_name(Dtype dtype) { return entry_of(dtype).name; }

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const DtypeEntry& entry : k_dtypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::size_t dtype_size(Dtype dtype) { return entry_of(dtype).size; }

std::optional<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t numel = 1;
  for (const std::int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel)) return std::nullopt;
  }
  return numel;
}

std::int64_t TensorInfo::numel() const {
  const auto numel = checked_numel(shape);
  if (!numel) {
    throw Error("safetensors: " + tensor_label(name) + " has invalid shape " + format_shape(shape) +
                " (negative dim or element count overflow)");
  }
  return *numel;
}

File::File(File&& other) noexcept
    : m_path(std::move(other.m_path)),
      m_owned(std::move(other.m_owned)),
      m_header(std::move(other.m_header)),
      m_map(std::exchange(other.m_map, nullptr)),
      m_mapped(std::exchange(other.m_mapped, false)),
      m_writable(std::exchange(other.m_writable, false)),
      m_file_size(std::exchange(other.m_file_size, 0)),
      m_data_offset(std::exchange(other.m_data_offset, 0)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    release();
    m_path = std::move(other.m_path);
    m_owned = std::move(other.m_owned);
    m_header = std::move(other.m_header);
    m_map = std::exchange(other.m_map, nullptr);
    m_mapped = std::exchange(other.m_mapped, false);
    m_writable = std::exchange(other.m_writable, false);
    m_file_size = std::exchange(other.m_file_size, 0);
    m_data_offset = std::exchange(other.m_data_offset, 0);
  }
  return *this;
}

File::~File() { release(); }

// What validate() derives from a header (Note [Validated headers]). The cache keeps the header's
// text and the file's size to know it again; a File only reads the rest.
struct File::Header {
  std::uint64_t file_size = 0;
  std::string text;
  std::vector<TensorInfo> tensors;                         // in data order
  std::map<std::string, std::size_t, std::less<>> index;  // name -> position in tensors
  std::map<std::string, std::string> metadata;
};

const std::vector<TensorInfo>& File::tensors() const {
  static const std::vector<TensorInfo> none;  // a File moved from
  return m_header ? m_header->tensors : none;
}

const std::map<std::string, std::string>& File::metadata() const {
  static const std::map<std::string, std::string> none;
  return m_header ? m_header->metadata : none;
}

namespace {

// The live maps of File::open, [begin, end), for release_mapped_pages.
struct MapRegistry {
  std::mutex mutex;
  std::map<std::uintptr_t, std::uintptr_t> maps;  // begin -> end
};

MapRegistry& map_registry() {
  static MapRegistry* registry = new MapRegistry;  // never destroyed: maps may outlive statics
  return *registry;
}

// Note [Validated headers]: what validate() derives from a header (the tensors in data order,
// the index, the metadata) depends only on the header's bytes and the file's size. A run opens
// the same checkpoints many times (every pass loads each one, model B and the stream-order pass
// again); a 10,000-tensor header took 80-100 ms to parse, check and free each time, 4% of a run
// with every probe (issue 26). So the last few large headers that passed are kept with what they
// gave, and a file whose header is byte for byte one of them, at the same size, takes that
// instead of parsing again. A header that fails is never kept: its error is found anew. The File
// shares what was kept rather than copying it: a copy of 100,000 names, their index and its
// freeing made each open of a known header cost more per tensor the more tensors it had
// (bench/harness_bench BM_RecordedLoad).
class HeaderCache {
 public:
  // Headers below this are parsed again: the comparison would save little. Above the second
  // (100,000 tensors have about 8 MiB), too: four of them would keep a lot of heap for good.
  static constexpr std::uint64_t kMinBytes = 16 << 10;
  static constexpr std::uint64_t kMaxBytes = std::uint64_t{32} << 20;
  static constexpr std::size_t kEntries = 4;

  std::shared_ptr<const File::Header> find(std::uint64_t file_size, std::string_view text) {
    std::lock_guard<std::mutex> lock(m_mutex);
    for (const auto& e : m_entries) {
      if (e->file_size == file_size && e->text.size() == text.size() &&
          std::memcmp(e->text.data(), text.data(), text.size()) == 0) {
        return e;
      }
    }
    return nullptr;
  }
  void add(std::shared_ptr<const File::Header> entry) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_entries.insert(m_entries.begin(), std::move(entry));
    if (m_entries.size() > kEntries) m_entries.pop_back();
  }

 private:
  std::mutex m_mutex;
  std::vector<std::shared_ptr<const File::Header>> m_entries;  // the latest first
};

HeaderCache& header_cache() {
  static HeaderCache* cache = new HeaderCache;  // never destroyed: files may be opened by statics
  return *cache;
}

}  // namespace

std::size_t release_mapped_pages(const void* data, std::size_t bytes) noexcept {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const auto end = begin + bytes;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  MapRegistry& registry = map_registry();
  std::lock_guard lock(registry.mutex);
  std::size_t released = 0;
  // Each map the range meets (two maps can lie side by side), its part of the range.
  auto it = registry.maps.upper_bound(begin);
  if (it != registry.maps.begin()) --it;
  for (; it != registry.maps.end() && it->first < end; ++it) {
    const std::uintptr_t from = std::max(begin, it->first), to = std::min(end, it->second);
    // The map's last page is the map's alone past the file's end: a range that reaches the end
    // takes it whole (a file smaller than a page has no other).
    const std::uintptr_t last = to == it->second ? (to + page - 1) / page * page : to / page * page;
    const std::uintptr_t first = (from + page - 1) / page * page;
    if (from >= to || first >= last) continue;
    if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0) released += last - first;
  }
  return released;
}

namespace {

// /proc/self/pagemap, opened once per process (a fork's child opens its own: "self" is resolved at
// the open), and whether it tells pages apart here.
class Pagemap {
 public:
  // Entry bits (Documentation/admin-guide/mm/pagemap.rst).
  static constexpr std::uint64_t kPresent = std::uint64_t{1} << 63;
  static constexpr std::uint64_t kSwapped = std::uint64_t{1} << 62;
  static constexpr std::uint64_t kFileOrShared = std::uint64_t{1} << 61;

  // The entries of pages [first, first + count) into `out`; false where the table cannot be read.
  bool read(std::uintptr_t first_page, std::size_t count, std::uint64_t* out) {
    std::lock_guard lock(m_mutex);
    if (!ready()) return false;
    const auto bytes = count * sizeof(std::uint64_t);
    const auto at = static_cast<off_t>(first_page * sizeof(std::uint64_t));
    return ::pread(m_fd, out, bytes, at) == static_cast<ssize_t>(bytes);
  }

 private:
  bool ready() {
    if (m_pid == ::getpid()) return m_usable;
    if (m_fd >= 0) ::close(m_fd);
    m_pid = ::getpid();
    m_usable = false;
    m_fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (m_fd < 0) return false;
    // The rule itself, on a private map of a file of two pages: the page read must read as the
    // file's, the page written as present and not the file's. A kernel or sandbox that reports
    // otherwise (the file bit per map rather than per page) cannot tell written pages apart.
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const int file = static_cast<int>(::syscall(SYS_memfd_create, "graphcheck-pagemap-probe", 0u));
    if (file < 0) return false;
    void* map = MAP_FAILED;
    const std::vector<std::uint8_t> content(2 * page, 0x5A);  // pages the file holds, not holes
    if (::pwrite(file, content.data(), content.size(), 0) == static_cast<ssize_t>(content.size())) {
      map = ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE, file, 0);
    }
    ::close(file);
    if (map == MAP_FAILED) return false;
    auto* bytes = static_cast<volatile std::uint8_t*>(map);
    (void)bytes[0];  // read: the file's page
    bytes[page] = 1;  // written: a private copy
    std::uint64_t entries[2] = {0, 0};
    const auto at = static_cast<off_t>(reinterpret_cast<std::uintptr_t>(map) / page * sizeof(std::uint64_t));
    const bool read_back = ::pread(m_fd, entries, sizeof entries, at) == static_cast<ssize_t>(sizeof entries);
    ::munmap(map, 2 * page);
    m_usable = read_back && (entries[0] & kPresent) != 0 && (entries[0] & kFileOrShared) != 0 &&
               (entries[1] & kPresent) != 0 && (entries[1] & kFileOrShared) == 0;
    return m_usable;
  }

  std::mutex m_mutex;
  pid_t m_pid = -1;
  int m_fd = -1;
  bool m_usable = false;
};

Pagemap& pagemap() {
  static Pagemap* table = new Pagemap;  // never destroyed: maps may outlive statics
  return *table;
}

}  // namespace

bool lies_in_map(const void* data, std::size_t bytes) noexcept {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  MapRegistry& registry = map_registry();
  std::lock_guard lock(registry.mutex);
  auto it = registry.maps.upper_bound(begin);
  if (it == registry.maps.begin()) return false;
  --it;
  return begin >= it->first && begin + bytes <= it->second;
}

PageWrites mapped_pages_written(const void* data, std::size_t bytes) noexcept {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const auto end = begin + bytes;
  if (bytes == 0) return PageWrites::clean;
  if (!lies_in_map(data, bytes)) return PageWrites::unknown;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  constexpr std::size_t kBatch = 512;
  std::uint64_t entries[kBatch];
  for (std::uintptr_t p = begin / page, last = (end - 1) / page; p <= last;) {
    const std::size_t count = std::min<std::uintptr_t>(kBatch, last - p + 1);
    if (!pagemap().read(p, count, entries)) return PageWrites::unknown;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint64_t e = entries[i];
      // Not present and not swapped: never touched, or released (the file's bytes come back).
      if ((e & Pagemap::kSwapped) != 0) return PageWrites::written;
      if ((e & Pagemap::kPresent) != 0 && (e & Pagemap::kFileOrShared) == 0) return PageWrites::written;
    }
    p += count;
  }
  return PageWrites::clean;
}

void File::release() noexcept {
  if (m_map != nullptr && m_mapped) {
    {
      MapRegistry& registry = map_registry();
      std::lock_guard lock(registry.mutex);
      registry.maps.erase(reinterpret_cast<std::uintptr_t>(m_map));
    }
    ::munmap(const_cast<std::byte*>(m_map), static_cast<std::size_t>(m_file_size));
  }
  m_map = nullptr;
  m_mapped = false;
  m_writable = false;
  m_owned.clear();
}

File File::open(const std::string& path, Mapping mapping) {
  // Refuses FIFOs, directories and devices before opening them (an open() of a FIFO blocks).
  std::string problem;
  bool not_regular = false;
  RegularFile input = open_regular_file(path, problem, &not_regular);
  if (not_regular) fail(path, problem + ": give the path of a .safetensors file");
  if (input.fd() < 0) fail(path, problem);
  const std::uint64_t size = input.size();
  check_prefix(path, size);

  File file;
  file.m_path = path;
  const bool writable = mapping == Mapping::copy_on_write;
  // MAP_PRIVATE either way: a copy_on_write map's writes copy the page and never reach the file.
  void* map = ::mmap(nullptr, static_cast<std::size_t>(size), writable ? PROT_READ | PROT_WRITE : PROT_READ,
                     MAP_PRIVATE, input.fd(), 0);
  if (map == MAP_FAILED)
    fail(path, "cannot mmap " + std::to_string(size) + " bytes: " + errno_text(errno));
  file.m_map = static_cast<const std::byte*>(map);  // unmapped by ~File from here on
  file.m_mapped = true;
  {
    MapRegistry& registry = map_registry();
    std::lock_guard lock(registry.mutex);
    const auto begin = reinterpret_cast<std::uintptr_t>(map);
    registry.maps[begin] = begin + static_cast<std::uintptr_t>(size);
  }
  file.m_writable = writable;
  file.m_file_size = size;
  input.close();
  file.validate();
  return file;
}

File File::parse(std::span<const std::byte> bytes, const std::string& name) {
  check_prefix(name, bytes.size());
  File file;
  file.m_path = name;
  file.m_owned.assign(bytes.begin(), bytes.end());
  file.m_map = file.m_owned.data();
  file.m_writable = true;
  file.m_file_size = bytes.size();
  file.validate();
  return file;
}

void File::validate() {
  const std::string& path = m_path;
  const std::uint64_t size = m_file_size;
  const std::uint64_t header_size = read_le64(m_map);
  if (header_size > k_max_header_size) {
    fail(path, "header size " + std::to_string(header_size) + " is absurdly large (over the " +
                   std::to_string(k_max_header_size) +
                   "-byte cap on safetensors headers): the file is corrupt or not a safetensors "
                   "file");
  }
  if (header_size > size - k_prefix_size) {
    fail(path, "header size " + std::to_string(header_size) + " runs past the end of the file (" +
                   std::to_string(size) +
                   " bytes): the file is truncated or not a safetensors "
                   "file");
  }
  m_data_offset = k_prefix_size + header_size;
  const std::uint64_t data_size = size - m_data_offset;

  const auto* text = reinterpret_cast<const char*>(m_map + k_prefix_size);
  // Note [Validated headers]
  const std::string_view header_text(text, header_size);
  const bool cacheable = header_size >= HeaderCache::kMinBytes && header_size <= HeaderCache::kMaxBytes;
  if (cacheable) {
    if (auto known = header_cache().find(size, header_text)) {
      m_header = std::move(known);
      return;
    }
  }
  auto header = std::make_shared<Header>();
  validate_header(text, header_size, data_size, *header);
  if (cacheable) {
    header->file_size = size;
    header->text.assign(header_text);
    header_cache().add(header);
  }
  m_header = std::move(header);
}

void File::validate_header(const char* text, std::uint64_t header_size, std::uint64_t data_size,
                           Header& out) const {
  const std::string& path = m_path;
  const Json header = parse_header(path, text, text + header_size);
  if (!header.is_object()) {
    fail(path,
         "header is not a JSON object but " + a_type(header) +
             "; expected {\"name\": {\"dtype\": ..., \"shape\": ..., \"data_offsets\": ...}}");
  }

  for (const auto& [key, value] : header.items()) {
    if (key == k_metadata_key) {
      parse_metadata(path, value, out.metadata);
    } else {
      out.tensors.push_back(parse_entry(path, key, value, data_size));
    }
  }

  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  std::uint64_t covered = 0;  // end of the previous tensor
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& info : out.tensors) {
    if (info.begin < covered) {
      fail(path, tensor_label(info.name) + " (bytes [" + std::to_string(info.begin) + ", " +
                     std::to_string(info.end) + ")) overlaps " + tensor_label(previous->name) +
                     " (bytes [" + std::to_string(previous->begin) + ", " +
                     std::to_string(previous->end) + ")): overlapping tensors are not allowed");
    }
    if (info.begin > covered) {
      fail(path, "hole of " + std::to_string(info.begin - covered) + " bytes in the data section " +
                     "before " + tensor_label(info.name) + " (bytes [" + std::to_string(covered) +
                     ", " + std::to_string(info.begin) +
                     ") belong to no tensor): tensors must be packed back to back from offset 0, "
                     "as the reference implementation requires");
    }
    covered = info.end;
    previous = &info;
  }
  if (covered != data_size) {
    fail(path, std::to_string(data_size - covered) + " trailing bytes after the last tensor are " +
                   "not covered by any tensor (data section is " + std::to_string(data_size) +
                   " bytes, tensors end at " + std::to_string(covered) +
                   "): the header and data disagree; rewrite the file");
  }

  for (std::size_t i = 0; i < out.tensors.size(); ++i) {
    // parse_header already rejected duplicate keys; this is a second guard.
    if (!out.index.emplace(out.tensors[i].name, i).second) {
      fail(path, tensor_label(out.tensors[i].name) + " is declared twice (duplicate name)");
    }
  }
}

const TensorInfo* File::find(std::string_view name) const {
  if (!m_header) return nullptr;
  const auto it = m_header->index.find(name);
  return it == m_header->index.end() ? nullptr : &m_header->tensors[it->second];
}

const std::byte* File::data(const TensorInfo& info) const {
  const std::uint64_t data_size = m_file_size - m_data_offset;
  if (m_map == nullptr || info.begin > info.end || info.end > data_size) {
    fail(m_path, tensor_label(info.name) + " byte range [" + std::to_string(info.begin) + ", " +
                     std::to_string(info.end) + ") is outside this file's " +
                     std::to_string(data_size) +
                     "-byte data section; pass a TensorInfo obtained from this File");
  }
  return m_map + m_data_offset + info.begin;
}

std::byte* File::mutable_data(const TensorInfo& info) {
  if (!m_writable) {
    fail(m_path, tensor_label(info.name) + ": the file is mapped read-only; open it with "
                     "Mapping::copy_on_write to write into its tensors");
  }
  return const_cast<std::byte*>(data(info));
}

}  // namespace graphcheck::safetensors
