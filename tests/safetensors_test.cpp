// Unit tests for graphcheck's safetensors reader and writer. No torch, no Python.
//
// GRAPHCHECK_TESTDATA_DIR names the folder of files written by the reference implementation
// (see its README.md): every tensor has shape [6] holding range(-3, 3) cast to its dtype.
#include "graphcheck/safetensors.h"
#include "resident_memory.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#ifndef GRAPHCHECK_TESTDATA_DIR
#error "GRAPHCHECK_TESTDATA_DIR must name the safetensors reference folder"
#endif

namespace graphcheck::safetensors {
namespace {

namespace fs = std::filesystem;

const fs::path k_reference_dir = fs::path(GRAPHCHECK_TESTDATA_DIR);

// IEEE 754 binary16 -> float, written out so the test does not trust any library conversion.
double half_to_double(std::uint16_t bits) {
  const int sign = bits >> 15;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  double value = 0.0;
  if (exponent == 0) {
    value = std::ldexp(mantissa, -24);  // zero and subnormals
  } else if (exponent == 31) {
    value = mantissa != 0 ? std::nan("") : std::numeric_limits<double>::infinity();
  } else {
    value = std::ldexp(mantissa + 1024, exponent - 25);
  }
  return sign != 0 ? -value : value;
}

double bf16_to_double(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float value = 0.0f;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

template <typename T>
T load(const std::byte* p, std::size_t index) {
  T value{};
  std::memcpy(&value, p + index * sizeof(T), sizeof(T));
  return value;
}

// Decodes every element of a tensor as a double (exact for all values these tests use).
std::vector<double> decode(const File& file, const TensorInfo& info) {
  const std::byte* p = file.data(info);
  const auto n = static_cast<std::size_t>(info.numel());
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) {
    switch (info.dtype) {
      case Dtype::F64:
        out.push_back(load<double>(p, i));
        break;
      case Dtype::F32:
        out.push_back(load<float>(p, i));
        break;
      case Dtype::F16:
        out.push_back(half_to_double(load<std::uint16_t>(p, i)));
        break;
      case Dtype::BF16:
        out.push_back(bf16_to_double(load<std::uint16_t>(p, i)));
        break;
      case Dtype::I64:
        out.push_back(static_cast<double>(load<std::int64_t>(p, i)));
        break;
      case Dtype::I32:
        out.push_back(load<std::int32_t>(p, i));
        break;
      case Dtype::I16:
        out.push_back(load<std::int16_t>(p, i));
        break;
      case Dtype::I8:
        out.push_back(load<std::int8_t>(p, i));
        break;
      case Dtype::U64:
        out.push_back(static_cast<double>(load<std::uint64_t>(p, i)));
        break;
      case Dtype::U32:
        out.push_back(load<std::uint32_t>(p, i));
        break;
      case Dtype::U16:
        out.push_back(load<std::uint16_t>(p, i));
        break;
      case Dtype::U8:
      case Dtype::BOOL:
        out.push_back(load<std::uint8_t>(p, i));
        break;
      default:
        ADD_FAILURE() << "decode: no decoder for " << dtype_name(info.dtype);
        return {};
    }
  }
  return out;
}

std::string le64(std::uint64_t value) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return out;
}

// A safetensors file image: size prefix, header text, data bytes.
std::string image(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "graphcheck_st_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << "mkdtemp failed for " << pattern;
    m_dir = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    if (!m_dir.empty()) fs::remove_all(m_dir, ec);
  }

  std::string put(const std::string& name, const std::string& bytes) {
    const fs::path path = m_dir / name;
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << "cannot write " << path;
    return path.string();
  }

  // Opens path expecting an Error whose message names the file and holds every phrase.
  static void expect_open_error(const std::string& path,
                                std::initializer_list<std::string> phrases) {
    try {
      const File file = File::open(path);
      ADD_FAILURE() << "File::open(" << path << ") accepted the file (" << file.tensors().size()
                    << " tensors); expected an Error mentioning '" << *phrases.begin() << "'";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << "message lacks the path: " << message;
      for (const std::string& phrase : phrases) {
        EXPECT_NE(message.find(phrase), std::string::npos)
            << "message lacks '" << phrase << "': " << message;
      }
    }
  }

  // Writes the image and expects File::open to reject it.
  void expect_rejected(const std::string& name, const std::string& bytes,
                       std::initializer_list<std::string> phrases) {
    SCOPED_TRACE(name);
    expect_open_error(put(name, bytes), phrases);
  }

  fs::path m_dir;
};

// ---------------------------------------------------------------------------------------------
// Dtypes

TEST(SafetensorsDtype, NamesRoundTripAndSizes) {
  ASSERT_EQ(all_dtypes().size(), 16u);
  for (const Dtype dtype : all_dtypes()) {
    const auto parsed = parse_dtype(dtype_name(dtype));
    ASSERT_TRUE(parsed.has_value()) << dtype_name(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(dtype_name(Dtype::F32), "F32");
  EXPECT_EQ(dtype_name(Dtype::BF16), "BF16");
  EXPECT_EQ(dtype_name(Dtype::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_name(Dtype::F8_E5M2), "F8_E5M2");
  EXPECT_EQ(dtype_name(Dtype::E8M0), "F8_E8M0");
  EXPECT_EQ(dtype_name(Dtype::BOOL), "BOOL");
  EXPECT_EQ(dtype_size(Dtype::F64), 8u);
  EXPECT_EQ(dtype_size(Dtype::U64), 8u);
  EXPECT_EQ(dtype_size(Dtype::I32), 4u);
  EXPECT_EQ(dtype_size(Dtype::F16), 2u);
  EXPECT_EQ(dtype_size(Dtype::BF16), 2u);
  EXPECT_EQ(dtype_size(Dtype::U8), 1u);
  EXPECT_EQ(dtype_size(Dtype::BOOL), 1u);
  EXPECT_EQ(dtype_size(Dtype::E8M0), 1u);
  EXPECT_FALSE(parse_dtype("E8M0").has_value());
  EXPECT_FALSE(parse_dtype("f32").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
  EXPECT_FALSE(parse_dtype("F32 ").has_value());
}

TEST(SafetensorsDtype, Numel) {
  EXPECT_EQ(checked_numel({}), 1);
  EXPECT_EQ(checked_numel({2, 3}), 6);
  EXPECT_EQ(checked_numel({4, 0, 7}), 0);
  EXPECT_FALSE(checked_numel({-1}).has_value());
  EXPECT_FALSE(checked_numel({std::int64_t{1} << 32, std::int64_t{1} << 32}).has_value());
  TensorInfo scalar;
  EXPECT_EQ(scalar.numel(), 1);
  TensorInfo bad;
  bad.name = "bad";
  bad.shape = {-2};
  EXPECT_THROW((void)bad.numel(), Error);
}

// ---------------------------------------------------------------------------------------------
// Files written by the reference implementation

struct ReferenceCase {
  const char* file;
  const char* tensor;
  Dtype dtype;
  std::vector<double> values;
};

std::ostream& operator<<(std::ostream& os, const ReferenceCase& c) { return os << c.file; }

const std::vector<double> k_signed = {-3, -2, -1, 0, 1, 2};

std::vector<ReferenceCase> reference_cases() {
  return {
      {"B.safetensors", "B", Dtype::U8, {253, 254, 255, 0, 1, 2}},
      {"H.safetensors", "H", Dtype::U16, {65533, 65534, 65535, 0, 1, 2}},
      {"I.safetensors", "I", Dtype::U32, {4294967293.0, 4294967294.0, 4294967295.0, 0, 1, 2}},
      {"b.safetensors", "b", Dtype::I8, k_signed},
      {"h.safetensors", "h", Dtype::I16, k_signed},
      {"i.safetensors", "i", Dtype::I32, k_signed},
      {"e.safetensors", "e", Dtype::F16, k_signed},
      {"f.safetensors", "f", Dtype::F32, k_signed},
      {"d.safetensors", "d", Dtype::F64, k_signed},
  };
}

class SafetensorsReference : public ::testing::TestWithParam<ReferenceCase> {};

TEST_P(SafetensorsReference, ReadsExactValues) {
  const ReferenceCase& c = GetParam();
  const File file = File::open((k_reference_dir / c.file).string());
  EXPECT_EQ(file.file_size(), fs::file_size(k_reference_dir / c.file));
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"test", "a"}}));
  ASSERT_EQ(file.tensors().size(), 1u);
  const TensorInfo* info = file.find(c.tensor);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info, &file.tensors()[0]);
  EXPECT_EQ(info->name, c.tensor);
  EXPECT_EQ(info->dtype, c.dtype);
  EXPECT_EQ(info->shape, std::vector<std::int64_t>{6});
  EXPECT_EQ(info->numel(), 6);
  EXPECT_EQ(info->begin, 0u);
  EXPECT_EQ(info->nbytes(), 6 * dtype_size(c.dtype));
  EXPECT_EQ(file.data_offset() + info->nbytes(), file.file_size());
  EXPECT_EQ(decode(file, *info), c.values);
  EXPECT_EQ(file.find("missing"), nullptr);
}

// graphcheck's writer produces the same header text (up to alignment padding, which this older
// reference writer did not add) and the same data bytes.
TEST_P(SafetensorsReference, WriterReproducesReferenceBytes) {
  const ReferenceCase& c = GetParam();
  const File reference = File::open((k_reference_dir / c.file).string());
  const TensorInfo& info = reference.tensors().at(0);
  const fs::path out = fs::temp_directory_path() /
                       ("graphcheck_st_ref_" + std::to_string(::getpid()) + "_" + c.tensor);
  write(out.string(),
        {{info.name, info.dtype, info.shape, reference.data(info),
          static_cast<std::size_t>(info.nbytes())}},
        reference.metadata());
  const std::string ours = read_all(out);
  const std::string theirs = read_all(k_reference_dir / c.file);
  fs::remove(out);

  const auto header_of = [](const std::string& bytes) {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes.at(i));
    std::string text = bytes.substr(8, n);
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text;
  };
  EXPECT_EQ(header_of(ours), header_of(theirs));
  EXPECT_EQ(ours.substr(ours.size() - info.nbytes()), theirs.substr(theirs.size() - info.nbytes()));
}

INSTANTIATE_TEST_SUITE_P(AllFiles, SafetensorsReference, ::testing::ValuesIn(reference_cases()),
                         [](const ::testing::TestParamInfo<ReferenceCase>& info) {
                           // Files B and b differ only by case: add the dtype for readability.
                           return std::string(info.param.tensor) + "_" +
                                  std::string(dtype_name(info.param.dtype));
                         });

TEST(SafetensorsReferenceOverall, ReadsAllNineSortedByOffset) {
  const File file = File::open((k_reference_dir / "overall.safetensors").string());
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"test", "a"}}));
  ASSERT_EQ(file.tensors().size(), 9u);
  std::uint64_t expected_begin = 0;
  for (const TensorInfo& info : file.tensors()) {
    EXPECT_EQ(info.begin, expected_begin) << info.name;
    expected_begin = info.end;
  }
  EXPECT_EQ(file.data_offset() + expected_begin, file.file_size());
  std::vector<std::string> names;
  for (const TensorInfo& info : file.tensors()) names.push_back(info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"B", "H", "I", "b", "d", "e", "f", "h", "i"}));
  for (const ReferenceCase& c : reference_cases()) {
    SCOPED_TRACE(c.tensor);
    const TensorInfo* info = file.find(c.tensor);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, c.dtype);
    EXPECT_EQ(info->shape, std::vector<std::int64_t>{6});
    EXPECT_EQ(decode(file, *info), c.values);
  }
}

TEST(SafetensorsReferenceOverall, F16BitsDecodeAsExpected) {
  // The raw bits of e.safetensors, checked independently of the decoder above.
  const File file = File::open((k_reference_dir / "e.safetensors").string());
  const TensorInfo& info = file.tensors().at(0);
  const std::vector<std::uint16_t> expected = {0xc200, 0xc000, 0xbc00, 0x0000, 0x3c00, 0x4000};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(load<std::uint16_t>(file.data(info), i), expected[i]) << i;
  }
  EXPECT_EQ(half_to_double(0x7bff), 65504.0);
  EXPECT_EQ(half_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(half_to_double(0x3555), 0.333251953125);
}

// ---------------------------------------------------------------------------------------------
// Writing

using SafetensorsWrite = TempDirTest;

std::vector<std::byte> pattern_bytes(std::size_t n, unsigned seed) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<std::byte>((i * 37 + seed * 11 + 5) & 0xff);
  return out;
}

TEST_F(SafetensorsWrite, RoundTripsEveryDtype) {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<TensorView> views;
  unsigned seed = 0;
  // Smallest element size first so that the writer's reordering is exercised.
  std::vector<Dtype> dtypes = all_dtypes();
  std::reverse(dtypes.begin(), dtypes.end());
  for (const Dtype dtype : dtypes) {
    buffers.push_back(pattern_bytes(2 * 3 * dtype_size(dtype), seed++));
  }
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    views.push_back({"t." + std::string(dtype_name(dtypes[i])),
                     dtypes[i],
                     {2, 3},
                     buffers[i].data(),
                     buffers[i].size()});
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "héllo"}};
  const std::string path = (m_dir / "all.safetensors").string();
  write(path, views, metadata);

  const File file = File::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.data_offset() % 8, 0u) << "data section must start 8-byte aligned";
  ASSERT_EQ(file.tensors().size(), views.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    SCOPED_TRACE(views[i].name);
    const TensorInfo* info = file.find(views[i].name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, views[i].dtype);
    EXPECT_EQ(info->shape, views[i].shape);
    ASSERT_EQ(info->nbytes(), views[i].nbytes);
    EXPECT_EQ(std::memcmp(file.data(*info), views[i].data, views[i].nbytes), 0);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(file.data(*info)) % dtype_size(info->dtype), 0u)
        << "tensor not aligned to its element size";
  }
  // Data order: element size descending, caller order within a size.
  std::vector<std::string> order;
  for (const TensorInfo& info : file.tensors()) order.push_back(info.name);
  EXPECT_EQ(order, (std::vector<std::string>{"t.U64", "t.I64", "t.F64", "t.U32", "t.I32", "t.F32",
                                             "t.U16", "t.I16", "t.BF16", "t.F16", "t.F8_E8M0",
                                             "t.F8_E5M2", "t.F8_E4M3", "t.BOOL", "t.U8", "t.I8"}));
  // The header is JSON followed only by spaces.
  const std::string bytes = read_all(path);
  const std::string header = bytes.substr(8, file.header_size());
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"héllo\"},", 0), 0u)
      << header;
  const std::size_t last = header.find_last_not_of(' ');
  ASSERT_NE(last, std::string::npos);
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - last - 1, 8u);
}

TEST_F(SafetensorsWrite, ScalarZeroSizeAndEmptyFile) {
  const double scalar = 42.5;
  const std::string path = (m_dir / "edge.safetensors").string();
  write(path, {{"scalar", Dtype::F64, {}, &scalar, sizeof scalar},
               {"empty", Dtype::F32, {0, 3}, nullptr, 0},
               {"also_empty", Dtype::U8, {5, 0}, nullptr, 0}});
  const File file = File::open(path);
  EXPECT_TRUE(file.metadata().empty());
  ASSERT_EQ(file.tensors().size(), 3u);
  const TensorInfo* s = file.find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(decode(file, *s), std::vector<double>{42.5});
  for (const char* name : {"empty", "also_empty"}) {
    const TensorInfo* e = file.find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->numel(), 0) << name;
    EXPECT_EQ(e->begin, e->end) << name;
    EXPECT_NE(file.data(*e), nullptr) << name;
  }

  const std::string empty_path = (m_dir / "none.safetensors").string();
  write(empty_path, {});
  const File none = File::open(empty_path);
  EXPECT_TRUE(none.tensors().empty());
  EXPECT_EQ(none.file_size(), 16u);  // prefix + "{}" padded to 8 bytes
  EXPECT_EQ(read_all(empty_path).substr(8), "{}      ");
}

TEST_F(SafetensorsWrite, OverwritesAtomicallyAndLeavesNoTempFiles) {
  const std::string path = (m_dir / "model.safetensors").string();
  const std::int32_t first[2] = {1, 2};
  const std::int32_t second[3] = {7, 8, 9};
  write(path, {{"x", Dtype::I32, {2}, first, sizeof first}});
  write(path, {{"y", Dtype::I32, {3}, second, sizeof second}}, {{"v", "2"}});
  const File file = File::open(path);
  ASSERT_EQ(file.tensors().size(), 1u);
  EXPECT_EQ(file.find("x"), nullptr);
  ASSERT_NE(file.find("y"), nullptr);
  EXPECT_EQ(decode(file, *file.find("y")), (std::vector<double>{7, 8, 9}));
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(m_dir)) {
    entries.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(entries, std::vector<std::string>{"model.safetensors"});
}

TEST_F(SafetensorsWrite, RejectsInvalidTensorsAndKeepsOldFile) {
  const std::string path = (m_dir / "keep.safetensors").string();
  const float values[4] = {1, 2, 3, 4};
  write(path, {{"w", Dtype::F32, {4}, values, sizeof values}});
  const std::string before = read_all(path);

  const auto expect_write_error = [&](const std::vector<TensorView>& tensors,
                                      const std::string& phrase) {
    try {
      write(path, tensors);
      ADD_FAILURE() << "write accepted tensors; expected an Error mentioning '" << phrase << "'";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_NE(message.find(phrase), std::string::npos) << "lacks '" << phrase << "': " << message;
    }
  };
  expect_write_error({{"w", Dtype::F32, {3}, values, sizeof values}}, "nbytes is 16");
  expect_write_error({{"w", Dtype::F64, {4}, values, sizeof values}}, "needs numel * dtype_size");
  expect_write_error({{"w", Dtype::F32, {4}, values, sizeof values},
                      {"w", Dtype::F32, {4}, values, sizeof values}},
                     "duplicate name");
  expect_write_error({{"__metadata__", Dtype::F32, {4}, values, sizeof values}}, "reserved");
  expect_write_error({{"w", Dtype::F32, {-4}, values, sizeof values}}, "negative dim");
  expect_write_error({{"w", Dtype::F32, {4}, nullptr, sizeof values}}, "data is null");
  expect_write_error({{"", Dtype::F32, {4}, values, sizeof values}}, "empty name");
  EXPECT_EQ(read_all(path), before) << "a rejected write must not touch the existing file";

  const std::string missing = (m_dir / "no_such_dir" / "x.safetensors").string();
  try {
    write(missing, {{"w", Dtype::F32, {4}, values, sizeof values}});
    ADD_FAILURE() << "write into a missing directory succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot create temporary file"), std::string::npos)
        << e.what();
  }
}

TEST_F(SafetensorsWrite, FileIsMoveOnlyAndDataRejectsForeignInfo) {
  static_assert(!std::is_copy_constructible_v<File>);
  static_assert(!std::is_copy_assignable_v<File>);
  static_assert(std::is_nothrow_move_constructible_v<File>);
  const std::string path = (m_dir / "move.safetensors").string();
  const std::int16_t values[3] = {-5, 6, 7};
  write(path, {{"v", Dtype::I16, {3}, values, sizeof values}});
  File a = File::open(path);
  const std::byte* before = a.data(*a.find("v"));
  File b = std::move(a);
  ASSERT_NE(b.find("v"), nullptr);
  EXPECT_EQ(b.data(*b.find("v")), before);
  EXPECT_EQ(decode(b, *b.find("v")), (std::vector<double>{-5, 6, 7}));
  File c = File::open((k_reference_dir / "d.safetensors").string());
  c = std::move(b);
  EXPECT_EQ(decode(c, *c.find("v")), (std::vector<double>{-5, 6, 7}));

  TensorInfo foreign;
  foreign.name = "foreign";
  foreign.dtype = Dtype::U8;
  foreign.shape = {100};
  foreign.begin = 0;
  foreign.end = 100;
  try {
    (void)c.data(foreign);
    ADD_FAILURE() << "data() accepted a range outside the file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'foreign'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// Note [Validated headers]: a large header seen before is not parsed again, but a file whose
// header or size differs from it in anything is checked in full: a copy cut short, one with a
// byte of its header changed, and one grown by a byte are each refused, after the good file was
// opened (and its header kept).
TEST_F(SafetensorsWrite, AKnownHeaderIsReusedOnlyForTheSameHeaderAndSize) {
  const std::string path = (m_dir / "many.safetensors").string();
  std::vector<std::int32_t> values(600);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int32_t>(i);
  std::vector<std::string> names;
  for (int i = 0; i < 300; ++i) names.push_back("model.layers." + std::to_string(i) + ".mlp.experts.gate_proj.weight");
  std::vector<TensorView> views;
  for (std::size_t i = 0; i < names.size(); ++i) views.push_back({names[i], Dtype::I32, {2}, &values[2 * i], 8});
  write(path, views);
  for (int round = 0; round < 2; ++round) {  // the second open takes the kept header
    const File file = File::open(path);
    ASSERT_GE(file.header_size(), 16u << 10) << "the header must be large enough to be kept";
    ASSERT_EQ(file.tensors().size(), 300u);
    ASSERT_NE(file.find(names[299]), nullptr);
    EXPECT_EQ(decode(file, *file.find(names[299])), (std::vector<double>{598, 599}));
  }
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  expect_rejected("short.safetensors", bytes.substr(0, bytes.size() - 4), {"truncated"});
  std::string grown = bytes + '\0';
  expect_rejected("grown.safetensors", grown, {"trailing bytes"});
  std::string changed = bytes;
  const auto at = changed.find("\"I32\"");
  ASSERT_NE(at, std::string::npos);
  changed.replace(at, 5, "\"I16\"");  // one tensor's dtype: its 8 bytes no longer fit its shape
  expect_rejected("changed.safetensors", changed, {"'model.layers."});
}

// ---------------------------------------------------------------------------------------------
// Files graphcheck must accept although its writer would not produce them

using SafetensorsAccept = TempDirTest;

TEST_F(SafetensorsAccept, UnpaddedOutOfOrderHeaderWithZeroSizeTensors) {
  // Header order differs from data order; zero-size tensors sit at the start, middle and end.
  const std::string header = R"( {"z_end":{"dtype":"F32","shape":[0],"data_offsets":[12,12]},)"
                             R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]},)"
                             R"("__metadata__":null,)"
                             R"("a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                             R"("m":{"dtype":"I64","shape":[3,0],"data_offsets":[8,8]},)"
                             R"("s":{"dtype":"BOOL","shape":[0],"data_offsets":[0,0]}}   )";
  std::string data;
  const std::int32_t a[2] = {-7, 9};
  data.append(reinterpret_cast<const char*>(a), sizeof a);
  data += std::string("\x01\x02\x03\x04", 4);
  const File file = File::open(put("odd.safetensors", image(header, data)));
  std::vector<std::string> order;
  for (const TensorInfo& info : file.tensors()) order.push_back(info.name);
  EXPECT_EQ(order, (std::vector<std::string>{"s", "a", "m", "b", "z_end"}));
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_EQ(decode(file, *file.find("a")), (std::vector<double>{-7, 9}));
  EXPECT_EQ(decode(file, *file.find("b")), (std::vector<double>{1, 2, 3, 4}));
}

// ---------------------------------------------------------------------------------------------
// Malformed files: each is an Error naming the file and the problem

using SafetensorsMalformed = TempDirTest;

const std::string k_entry_u8_4 = R"({"dtype":"U8","shape":[4],"data_offsets":[0,4]})";

TEST_F(SafetensorsMalformed, TruncatedPrefix) {
  expect_rejected("short.safetensors", std::string("\x02\x00\x00", 3), {"truncated", "3 bytes"});
  expect_rejected("empty.safetensors", "", {"truncated", "0 bytes"});
}

TEST_F(SafetensorsMalformed, HeaderSizePastEndOfFile) {
  expect_rejected("past.safetensors", le64(1000) + "{}", {"past the end of the file"});
  expect_rejected("past_by_one.safetensors", le64(3) + "{}", {"past the end of the file"});
}

TEST_F(SafetensorsMalformed, HeaderSizeAbsurdlyLarge) {
  expect_rejected("huge.safetensors", le64(std::uint64_t{1} << 62) + "{}",
                  {"absurdly large", "100000000"});
  expect_rejected("max.safetensors", le64(~std::uint64_t{0}) + "{}", {"absurdly large"});
}

TEST_F(SafetensorsMalformed, HeaderNotJson) {
  expect_rejected("garbage.safetensors", image("{not json"), {"not valid JSON"});
  expect_rejected("nul_pad.safetensors", image(std::string("{}\0\0", 4)), {"not valid JSON"});
  expect_rejected("bad_utf8.safetensors", image("{\"\xff\":1}"), {"not valid JSON"});
  expect_rejected("empty_header.safetensors", image(""), {"not valid JSON"});
}

TEST_F(SafetensorsMalformed, HeaderNestedTooDeeply) {
  expect_rejected("deep_array.safetensors", image(std::string(200, '[') + std::string(200, ']')),
                  {"deeper than 128 levels"});
  std::string deep = "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"x\":";
  for (int i = 0; i < 1000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(1002, '}');
  expect_rejected("deep_object.safetensors", image(deep, "abcd"), {"deeper than 128 levels"});
  // Brackets inside strings do not count.
  const std::string in_string = "{\"__metadata__\":{\"k\":\"" + std::string(300, '[') + "\\\"{\"}}";
  const File file = File::open(put("brackets_in_string.safetensors", image(in_string)));
  EXPECT_EQ(file.metadata().at("k"), std::string(300, '[') + "\"{");
}

TEST_F(SafetensorsMalformed, HeaderNotObject) {
  expect_rejected("array.safetensors", image("[1,2]"), {"not a JSON object", "array"});
  expect_rejected("string.safetensors", image("\"x\""), {"not a JSON object"});
}

TEST_F(SafetensorsMalformed, EntryNotObject) {
  expect_rejected("entry.safetensors", image(R"({"w":5})"), {"'w'", "not an object"});
}

TEST_F(SafetensorsMalformed, EntryMissingKey) {
  expect_rejected("missing.safetensors", image(R"({"w":{"dtype":"U8","shape":[4]}})", "abcd"),
                  {"'w'", "missing key 'data_offsets'"});
}

TEST_F(SafetensorsMalformed, EntryExtraKey) {
  expect_rejected(
      "extra.safetensors",
      image(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4],"offsets":[0,4]}})", "abcd"),
      {"'w'", "unexpected key 'offsets'"});
}

TEST_F(SafetensorsMalformed, EntryWrongTypes) {
  const std::string data = "abcd";
  expect_rejected("dtype_int.safetensors",
                  image(R"({"w":{"dtype":5,"shape":[4],"data_offsets":[0,4]}})", data),
                  {"'w'", "\"dtype\" must be a string"});
  expect_rejected("shape_str.safetensors",
                  image(R"({"w":{"dtype":"U8","shape":"4","data_offsets":[0,4]}})", data),
                  {"'w'", "\"shape\" must be an array"});
  expect_rejected("shape_float.safetensors",
                  image(R"({"w":{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}})", data),
                  {"'w'", "\"shape\" must be an array of non-negative integers"});
  expect_rejected("offsets_one.safetensors",
                  image(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4]}})", data),
                  {"'w'", "\"data_offsets\" must be an array of two"});
  expect_rejected("offsets_three.safetensors",
                  image(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4,4]}})", data),
                  {"'w'", "\"data_offsets\" must be an array of two"});
  expect_rejected("offsets_str.safetensors",
                  image(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,"4"]}})", data),
                  {"'w'", "\"data_offsets\" must be an array of two"});
  expect_rejected("offsets_negative.safetensors",
                  image(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[-1,4]}})", data),
                  {"'w'", "negative offset"});
}

TEST_F(SafetensorsMalformed, UnknownDtype) {
  expect_rejected("dtype.safetensors",
                  image(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "abcd"),
                  {"'w'", "unknown dtype 'F33'", "F32", "BF16", "F8_E8M0"});
  expect_rejected("lower.safetensors",
                  image(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", "abcd"),
                  {"unknown dtype 'f32'"});
}

TEST_F(SafetensorsMalformed, NegativeDim) {
  expect_rejected("neg.safetensors",
                  image(R"({"w":{"dtype":"U8","shape":[-1,4],"data_offsets":[0,4]}})", "abcd"),
                  {"'w'", "negative dim -1"});
}

TEST_F(SafetensorsMalformed, ShapeProductOverflow) {
  expect_rejected(
      "numel.safetensors",
      image(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      {"'w'", "overflow"});
  expect_rejected(
      "bytes.safetensors",
      image(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
      {"'w'", "overflow"});
  expect_rejected(
      "dim.safetensors",
      image(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})"),
      {"'w'", "overflow"});
}

TEST_F(SafetensorsMalformed, ShapeByteSizeMismatch) {
  expect_rejected(
      "mismatch.safetensors",
      image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x')),
      {"tensor 'w'", "shape/byte-size mismatch", "12 bytes"});
}

TEST_F(SafetensorsMalformed, ReversedOffsets) {
  expect_rejected(
      "reversed.safetensors",
      image(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", std::string(8, 'x')),
      {"'w'", "reversed"});
}

TEST_F(SafetensorsMalformed, OffsetsOutOfRange) {
  expect_rejected(
      "truncated_data.safetensors",
      image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, 'x')),
      {"'w'", "out of range", "truncated"});
}

TEST_F(SafetensorsMalformed, OverlappingTensors) {
  expect_rejected("overlap.safetensors",
                  image(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                        std::string(12, 'x')),
                  {"'b'", "overlaps", "'a'"});
  // A zero-size tensor inside another one is an overlap too (the reference rejects it).
  expect_rejected("overlap_empty.safetensors",
                  image(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})",
                        std::string(8, 'x')),
                  {"'b'", "overlaps"});
}

TEST_F(SafetensorsMalformed, HoleBetweenTensors) {
  expect_rejected("hole.safetensors",
                  image(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
                        std::string(12, 'x')),
                  {"hole of 4 bytes", "'b'"});
  expect_rejected(
      "leading_hole.safetensors",
      image(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", std::string(8, 'x')),
      {"hole of 4 bytes", "'a'"});
}

TEST_F(SafetensorsMalformed, TrailingBytes) {
  expect_rejected("trailing.safetensors", image("{\"w\":" + k_entry_u8_4 + "}", "abcdefgh"),
                  {"4 trailing bytes"});
  expect_rejected("no_tensors.safetensors", image("{}", "x"), {"1 trailing bytes"});
}

TEST_F(SafetensorsMalformed, DuplicateNames) {
  expect_rejected("dup.safetensors",
                  image("{\"w\":" + k_entry_u8_4 + ",\"w\":" + k_entry_u8_4 + "}", "abcd"),
                  {"tensor 'w'", "declared twice", "duplicate name"});
  expect_rejected(
      "dup_key.safetensors",
      image(R"({"w":{"dtype":"U8","dtype":"I8","shape":[4],"data_offsets":[0,4]}})", "abcd"),
      {"key 'dtype'", "duplicate key"});
  expect_rejected("dup_meta.safetensors",
                  image(R"({"__metadata__":{"a":"b"},"__metadata__":{"a":"c"}})"),
                  {"key '__metadata__'", "duplicate key"});
}

TEST_F(SafetensorsMalformed, MetadataNotStrings) {
  expect_rejected("meta_int.safetensors", image(R"({"__metadata__":{"a":1}})"),
                  {"__metadata__", "'a'", "non-string metadata value"});
  expect_rejected("meta_nested.safetensors", image(R"({"__metadata__":{"a":{"b":"c"}}})"),
                  {"'a'", "non-string metadata value"});
  expect_rejected("meta_array.safetensors", image(R"({"__metadata__":["a"]})"),
                  {"__metadata__", "must be an object of string -> string"});
}

TEST_F(SafetensorsMalformed, NotAFile) {
  const std::string missing = (m_dir / "missing.safetensors").string();
  expect_open_error(missing, {"cannot open", "No such file"});
  expect_open_error(m_dir.string(), {"is a directory, not a regular file"});
}

// Special files are refused before open(): an open() of a FIFO with no writer would block for
// ever, and /dev/zero would never end.
TEST_F(SafetensorsMalformed, SpecialFilesAreRefusedWithoutBlocking) {
  const std::string fifo = (m_dir / "pipe.safetensors").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << "mkfifo " << fifo;
  const auto start = std::chrono::steady_clock::now();
  expect_open_error(fifo, {"is a FIFO (named pipe), not a regular file"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  if (fs::exists("/dev/zero")) expect_open_error("/dev/zero", {"is a character device"});
  // A symlink to a regular file is followed; one to a FIFO is refused.
  const fs::path link = m_dir / "link.safetensors";
  fs::create_symlink(fifo, link);
  expect_open_error(link.string(), {"is a FIFO"});
}

TEST_F(SafetensorsMalformed, BinaryGarbage) {
  std::string garbage;
  std::uint32_t x = 12345;
  for (int i = 0; i < 4096; ++i) {
    x = x * 1103515245u + 12345u;
    garbage.push_back(static_cast<char>(x >> 24));
  }
  expect_rejected("garbage.safetensors", garbage, {"header size"});
  // A plausible size prefix before garbage: the JSON parser says no.
  expect_rejected("garbage_header.safetensors", le64(100) + garbage, {"not valid JSON"});
}

// A header with many keys parses in O(n log n): headers are read into std::map objects, not
// ordered_json's vectors, whose linear search per key made this quadratic.
TEST_F(SafetensorsAccept, ManyZeroSizeTensorsParseQuickly) {
  std::string header = "{";
  constexpr int k_count = 50'000;
  for (int i = 0; i < k_count; ++i) {
    if (i != 0) header += ',';
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}";
  }
  header += "}";
  const auto start = std::chrono::steady_clock::now();
  const File file = File::open(put("many.safetensors", image(header)));
  EXPECT_EQ(file.tensors().size(), static_cast<std::size_t>(k_count));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// File::parse validates an in-memory image exactly as File::open validates a file.
TEST_F(SafetensorsAccept, ParseInMemoryMatchesOpen) {
  const std::string bytes = image("{\"w\":" + k_entry_u8_4 + ",\"__metadata__\":{\"k\":\"v\"}}", "abcd");
  const File mapped = File::open(put("w.safetensors", bytes));
  File parsed = File::parse(std::as_bytes(std::span(bytes.data(), bytes.size())), "in-memory");
  EXPECT_EQ(parsed.path(), "in-memory");
  ASSERT_EQ(parsed.tensors().size(), 1u);
  EXPECT_EQ(parsed.tensors()[0].name, mapped.tensors()[0].name);
  EXPECT_EQ(parsed.metadata(), mapped.metadata());
  EXPECT_EQ(parsed.data_offset(), mapped.data_offset());
  EXPECT_EQ(std::memcmp(parsed.data(parsed.tensors()[0]), "abcd", 4), 0);
  // The copy travels with a move.
  const File moved = std::move(parsed);
  EXPECT_EQ(std::memcmp(moved.data(moved.tensors()[0]), "abcd", 4), 0);

  const auto parse_error = [](const std::string& image_bytes) {
    try {
      (void)File::parse(std::as_bytes(std::span(image_bytes.data(), image_bytes.size())), "mem");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(parse_error("").find("safetensors file 'mem': file is 0 bytes"), std::string::npos);
  EXPECT_NE(parse_error(le64(~std::uint64_t{0})).find("absurdly large"), std::string::npos);
  EXPECT_NE(parse_error(le64(9) + "{}").find("past the end of the file"), std::string::npos);
}


using graphcheck::testing::resident_kb_of_map;

// Note [Released pages]: the pages of a range inside a map leave the resident set and read back
// the file's bytes; memory outside every map is never touched.
TEST_F(SafetensorsAccept, ReleasedPagesLeaveTheResidentSetAndReadBackTheFile) {
  constexpr std::size_t kBytes = std::size_t{4} << 20;
  std::string data(kBytes, '\0');
  for (std::size_t i = 0; i < kBytes; ++i) data[i] = static_cast<char>(i * 131 + 7);
  const std::string header = "{\"w\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(kBytes) +
                             "],\"data_offsets\":[0," + std::to_string(kBytes) + "]}}";
  File file = File::open(put("big.safetensors", image(header, data)), Mapping::copy_on_write);
  const std::byte* bytes = file.data(file.tensors()[0]);
  EXPECT_EQ(std::memcmp(bytes, data.data(), kBytes), 0);  // every page touched
  EXPECT_GE(resident_kb_of_map(bytes), static_cast<std::int64_t>(kBytes >> 10) - 8);

  const std::size_t released = release_mapped_pages(bytes, kBytes);
  EXPECT_GE(released, kBytes - 2 * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
  EXPECT_LE(resident_kb_of_map(bytes), 8);
  EXPECT_EQ(std::memcmp(bytes, data.data(), kBytes), 0) << "the released pages read back other bytes";

  // Heap memory lies in no map: left as it is.
  std::vector<char> heap(data.begin(), data.end());
  EXPECT_EQ(release_mapped_pages(heap.data(), heap.size()), 0u);
  EXPECT_EQ(std::memcmp(heap.data(), data.data(), kBytes), 0);
  // Nor is a map once its File is gone.
  const std::byte* gone = bytes;
  file = File::open(put("small.safetensors", image("{}")));  // the big map is unmapped
  EXPECT_EQ(release_mapped_pages(gone, kBytes), 0u);
}

}  // namespace
}  // namespace graphcheck::safetensors
