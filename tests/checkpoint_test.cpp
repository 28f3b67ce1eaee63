// Unit tests for checkpoints as safetensors files (checkpoint.h) and the model helpers of
// model.h: load_module_weights, checkpoint_tensors, live_tensors, tensor attributes and the
// default synthesize_checkpoint.
#include "graphcheck/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "engine/streams.h"
#include "graphcheck/model.h"
#include "graphcheck/safetensors.h"
#include "synthesis_slabs.h"
#include "synthetic_fill.h"
#include "torch_compat.h"

#include "temp_dir_test.h"
#include "resident_memory.h"

namespace graphcheck {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;


class CheckpointFileTest : public testing::TempDirTest {};

// Same dtype, same shape, same bytes (in row-major order). Distinguishes -0.0 from 0.0 and
// compares NaN payloads, which torch::equal cannot.
::testing::AssertionResult same_bytes(const torch::Tensor& expected, const torch::Tensor& actual) {
  if (expected.scalar_type() != actual.scalar_type()) {
    return ::testing::AssertionFailure() << "dtype " << c10::toString(actual.scalar_type())
                                         << ", expected " << c10::toString(expected.scalar_type());
  }
  if (expected.sizes() != actual.sizes()) {
    return ::testing::AssertionFailure() << "shape " << actual.sizes() << ", expected "
                                         << expected.sizes();
  }
  const torch::Tensor e = expected.contiguous();
  const torch::Tensor a = actual.contiguous();
  if (e.nbytes() != 0 && std::memcmp(e.data_ptr(), a.data_ptr(), e.nbytes()) != 0) {
    return ::testing::AssertionFailure() << "bytes differ";
  }
  return ::testing::AssertionSuccess();
}

bool is_float8(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Float8_e4m3fn || dtype == c10::ScalarType::Float8_e5m2
#if GRAPHCHECK_HAS_FLOAT8_E8M0
         || dtype == c10::ScalarType::Float8_e8m0fnu
#endif
      ;
}

torch::Tensor int64_values(const std::vector<std::int64_t>& values, c10::ScalarType dtype) {
  return torch::tensor(values, torch::kInt64).to(dtype).reshape({2, 3});
}

// A small tensor of `dtype` holding the extremes of the type (for 8-bit floats: every byte).
torch::Tensor sample(c10::ScalarType dtype) {
  if (is_float8(dtype)) {
    return torch::arange(0, 256, torch::kInt64).to(torch::kUInt8).reshape({16, 16}).view(dtype);
  }
  switch (dtype) {
    case torch::kBool: return int64_values({1, 0, 0, 1, 1, 0}, dtype);
    case torch::kUInt8: return int64_values({0, 1, 127, 128, 254, 255}, dtype);
    case torch::kInt8: return int64_values({-128, -1, 0, 1, 100, 127}, dtype);
    case torch::kInt16: return int64_values({-32768, -1, 0, 1, 1000, 32767}, dtype);
    case torch::kInt32:
      return int64_values({std::numeric_limits<std::int32_t>::min(), -1, 0, 1, 123456789,
                           std::numeric_limits<std::int32_t>::max()},
                          dtype);
    case torch::kInt64:
      return int64_values({std::numeric_limits<std::int64_t>::min(), -1, 0, 1,
                           std::int64_t{1} << 40, std::numeric_limits<std::int64_t>::max()},
                          dtype);
    default: break;
  }
  // Floating types: a negative zero, a subnormal of float64, a value beyond float16's range.
  return torch::tensor(std::vector<double>{-1.0 / 3.0, -0.0, 1e300, 5e-324, 65504.0, 2.5},
                       torch::kFloat64)
      .to(dtype)
      .reshape({2, 3});
}

struct DtypeCase {
  c10::ScalarType dtype;
  const char* header_name;  // the safetensors spelling
};

std::ostream& operator<<(std::ostream& out, const DtypeCase& c) {
  return out << c.header_name << " (" << c10::toString(c.dtype) << ")";
}

std::vector<DtypeCase> round_trip_cases() {
  std::vector<DtypeCase> cases = {
      {torch::kFloat32, "F32"},  {torch::kFloat64, "F64"},
      {torch::kFloat16, "F16"},  {torch::kBFloat16, "BF16"},
      {torch::kInt64, "I64"},    {torch::kInt32, "I32"},
      {torch::kInt16, "I16"},    {torch::kInt8, "I8"},
      {torch::kUInt8, "U8"},     {torch::kBool, "BOOL"},
      {c10::ScalarType::Float8_e4m3fn, "F8_E4M3"},
      {c10::ScalarType::Float8_e5m2, "F8_E5M2"},
  };
#if GRAPHCHECK_HAS_FLOAT8_E8M0
  cases.push_back({c10::ScalarType::Float8_e8m0fnu, "F8_E8M0"});
#endif
  return cases;
}

// Every tensor of a stream, by name; fails the test on a repeated name.
std::map<std::string, torch::Tensor> drain(WeightStream& stream) {
  std::map<std::string, torch::Tensor> out;
  while (auto item = stream.next()) {
    EXPECT_TRUE(out.emplace(item->name, item->tensor).second) << "streamed twice: " << item->name;
  }
  EXPECT_FALSE(stream.next().has_value()) << "an exhausted stream must stay exhausted";
  return out;
}

// ---- save_checkpoint -> SafetensorsWeightStream ------------------------------------------------

class CheckpointRoundTrip : public CheckpointFileTest,
                            public ::testing::WithParamInterface<DtypeCase> {};

TEST_P(CheckpointRoundTrip, KeepsDtypeShapeAndBytes) {
  const DtypeCase& c = GetParam();
  const torch::Tensor value = sample(c.dtype);
  ASSERT_EQ(value.scalar_type(), c.dtype);
  const std::string path = path_of("t.safetensors");
  save_checkpoint(path, {{"t", value}});

  SafetensorsWeightStream stream(path);
  ASSERT_EQ(stream.file().tensors().size(), 1u);
  EXPECT_EQ(st::dtype_name(stream.file().tensors()[0].dtype), c.header_name);
  std::optional<NamedTensor> item = stream.next();
  ASSERT_TRUE(item.has_value());
  EXPECT_EQ(item->name, "t");
  EXPECT_TRUE(item->tensor.is_contiguous());
  EXPECT_TRUE(same_bytes(value, item->tensor));
  if (!is_float8(c.dtype)) {
    EXPECT_TRUE(torch::equal(value, item->tensor)) << value << "\n" << item->tensor;
  }
  EXPECT_FALSE(stream.next().has_value());
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointRoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         [](const ::testing::TestParamInfo<DtypeCase>& info) {
                           return std::string(info.param.header_name);
                         });

TEST_F(CheckpointFileTest, EveryDtypeInOneFileWithMetadata) {
  std::vector<NamedTensor> tensors;
  for (const auto& c : round_trip_cases()) {
    tensors.push_back({std::string("t.") + c.header_name, sample(c.dtype)});
  }
  tensors.push_back({"scalar", torch::tensor(3.5, torch::kFloat64).reshape({})});
  tensors.push_back({"empty", torch::zeros({0, 3}, torch::kFloat32)});
  const std::string path = path_of("all.safetensors");
  save_checkpoint(path, tensors, {{"format", "pt"}, {"seed", "1"}});

  SafetensorsWeightStream stream(path);
  EXPECT_EQ(stream.file().metadata(), (std::map<std::string, std::string>{{"format", "pt"},
                                                                           {"seed", "1"}}));
  EXPECT_EQ(stream.source(), "checkpoint '" + path + "'");

  // The stream delivers the tensors in the file's data order.
  std::vector<std::string> order;
  std::map<std::string, torch::Tensor> loaded;
  while (auto item = stream.next()) {
    order.push_back(item->name);
    loaded.emplace(item->name, item->tensor);
  }
  std::vector<std::string> file_order;
  for (const auto& info : stream.file().tensors()) file_order.push_back(info.name);
  EXPECT_EQ(order, file_order);

  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& t : tensors) {
    SCOPED_TRACE(t.name);
    ASSERT_EQ(loaded.count(t.name), 1u);
    EXPECT_TRUE(same_bytes(t.tensor, loaded.at(t.name)));
  }
  EXPECT_EQ(loaded.at("scalar").dim(), 0);
  EXPECT_EQ(loaded.at("scalar").item<double>(), 3.5);
  EXPECT_EQ(loaded.at("empty").sizes(), c10::IntArrayRef({0, 3}));
}

TEST_F(CheckpointFileTest, NonContiguousTensorsAreSavedContiguous) {
  const torch::Tensor base = torch::arange(12, torch::kFloat32).reshape({3, 4});
  const torch::Tensor before = base.clone();
  const torch::Tensor transposed = base.t();             // [4, 3], strides [1, 4]
  const torch::Tensor narrowed = base.narrow(1, 1, 2);  // [3, 2], storage offset 1
  ASSERT_FALSE(transposed.is_contiguous());
  ASSERT_FALSE(narrowed.is_contiguous());
  const std::string path = path_of("views.safetensors");
  save_checkpoint(path, {{"transposed", transposed}, {"narrowed", narrowed}});
  EXPECT_TRUE(torch::equal(base, before)) << "saving must not modify the source";

  SafetensorsWeightStream stream(path);
  // The file's bytes are the row-major order of the logical tensor.
  for (const auto& [name, view] : {std::pair<std::string, torch::Tensor>{"transposed", transposed},
                                   {"narrowed", narrowed}}) {
    SCOPED_TRACE(name);
    const st::TensorInfo* info = stream.file().find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->shape, std::vector<std::int64_t>(view.sizes().begin(), view.sizes().end()));
    const torch::Tensor expected = view.contiguous();
    ASSERT_EQ(info->nbytes(), static_cast<std::uint64_t>(expected.nbytes()));
    EXPECT_EQ(std::memcmp(stream.file().data(*info), expected.data_ptr(), expected.nbytes()), 0);
  }
  const auto loaded = drain(stream);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_TRUE(torch::equal(loaded.at("transposed"), transposed));
  EXPECT_TRUE(torch::equal(loaded.at("narrowed"), narrowed));
  EXPECT_TRUE(torch::equal(loaded.at("transposed")[1],
                           torch::tensor({1.0f, 5.0f, 9.0f}, torch::kFloat32)));
}

// ---- StreamReads::mapped ------------------------------------------------------------------------

TEST_F(CheckpointFileTest, MappedStreamYieldsTheFilesBytesWithoutACopy) {
  std::vector<NamedTensor> tensors;
  for (const auto& c : round_trip_cases()) tensors.push_back({std::string("t.") + c.header_name, sample(c.dtype)});
  tensors.push_back({"empty", torch::zeros({0, 3}, torch::kFloat32)});
  const std::string path = path_of("mapped.safetensors");
  save_checkpoint(path, tensors);

  SafetensorsWeightStream copies(path);
  SafetensorsWeightStream mapped(path, {}, {}, StreamReads::mapped);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::optional<NamedTensor> copy = copies.next();
    const std::optional<NamedTensor> view = mapped.next();
    ASSERT_TRUE(copy && view);
    SCOPED_TRACE(view->name);
    EXPECT_EQ(view->name, copy->name);
    EXPECT_EQ(view->tensor.scalar_type(), copy->tensor.scalar_type());
    EXPECT_EQ(view->tensor.sizes(), copy->tensor.sizes());
    EXPECT_TRUE(same_bytes(copy->tensor, view->tensor));
    const st::TensorInfo* info = mapped.file().find(view->name);
    ASSERT_NE(info, nullptr);
    if (info->nbytes() > 0) {
      // The view reads the map itself; the copy does not.
      EXPECT_EQ(view->tensor.data_ptr(), static_cast<const void*>(mapped.file().data(*info)));
      EXPECT_NE(copy->tensor.data_ptr(), static_cast<const void*>(copies.file().data(*copies.file().find(view->name))));
    }
  }
  EXPECT_FALSE(mapped.next().has_value());
}

TEST_F(CheckpointFileTest, AWriteIntoAMappedTensorStaysPrivateAndTheTensorOutlivesItsStream) {
  const torch::Tensor w = torch::arange(4096, torch::kFloat32);
  const std::string path = path_of("cow.safetensors");
  save_checkpoint(path, {{"w", w}});
  const auto bytes_before = fs::file_size(path);
  torch::Tensor kept;
  {
    SafetensorsWeightStream mapped(path, {}, {}, StreamReads::mapped);
    kept = mapped.next()->tensor;
    SafetensorsWeightStream other(path, {}, {}, StreamReads::mapped);
    const torch::Tensor second = other.next()->tensor;
    kept.mul_(2);  // a loader that scales what it is streamed
    EXPECT_TRUE(torch::equal(second, w)) << "a write reached another map of the file";
  }
  // The streams are gone; the tensor keeps its map.
  EXPECT_TRUE(torch::equal(kept, w * 2));
  EXPECT_EQ(fs::file_size(path), bytes_before);
  EXPECT_TRUE(torch::equal(drain(*std::make_unique<SafetensorsWeightStream>(path)).at("w"), w))
      << "a write into a mapped tensor reached the file";
}

TEST_F(CheckpointFileTest, AMappedTensorTheFileDoesNotAlignIsCopied) {
  // Written by hand: a 1-byte tensor first puts the float32 one at data offset 1.
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string image(8, '\0');
  for (int i = 0; i < 8; ++i) image[static_cast<std::size_t>(i)] = static_cast<char>((padded.size() >> (8 * i)) & 0xff);
  image += padded;
  image += '\x07';
  const float values[2] = {1.5f, -2.25f};
  image.append(reinterpret_cast<const char*>(values), sizeof values);
  const std::string path = path_of("unaligned.safetensors");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(image.data(), 1, image.size(), f), image.size());
    std::fclose(f);
  }
  SafetensorsWeightStream mapped(path, {}, {}, StreamReads::mapped);
  const auto a = mapped.next();
  const auto b = mapped.next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->tensor.item<std::uint8_t>(), 7);
  EXPECT_EQ(a->tensor.data_ptr(), static_cast<const void*>(mapped.file().data(*mapped.file().find("a"))));
  EXPECT_TRUE(torch::equal(b->tensor, torch::tensor({1.5f, -2.25f})));
  EXPECT_NE(b->tensor.data_ptr(), static_cast<const void*>(mapped.file().data(*mapped.file().find("b"))))
      << "a float32 view at an odd address";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b->tensor.data_ptr()) % alignof(float), 0u);
}

TEST_F(CheckpointFileTest, OnlyAMapOpenedCopyOnWriteHandsOutWritableBytes) {
  const std::string path = path_of("ro.safetensors");
  save_checkpoint(path, {{"w", torch::ones({4})}});
  st::File read_only = st::File::open(path);
  EXPECT_FALSE(read_only.writable());
  try {
    (void)read_only.mutable_data(read_only.tensors()[0]);
    ADD_FAILURE() << "a read-only map handed out writable bytes";
  } catch (const st::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("copy_on_write"));
  }
  st::File cow = st::File::open(path, st::Mapping::copy_on_write);
  EXPECT_TRUE(cow.writable());
  EXPECT_EQ(cow.mutable_data(cow.tensors()[0]), cow.data(cow.tensors()[0]));
}

// Note [Written pages of a map]: a read leaves a map's pages clean; a write through a copy_on_write
// map makes the page it lands on (and only that page) written; a release makes it the file's again.
TEST_F(CheckpointFileTest, ThePageTableTellsWhichPagesOfAMapWereWritten) {
  const std::string path = path_of("pages.safetensors");
  constexpr std::int64_t kElements = std::int64_t{1} << 16;  // 256 KiB each: pages of their own
  save_checkpoint(path, {{"a", torch::ones({kElements})}, {"b", torch::ones({kElements})}}, {},
                  st::Durability::scratch);
  st::File cow = st::File::open(path, st::Mapping::copy_on_write);
  const auto& a = cow.tensors()[0];
  const auto& b = cow.tensors()[1];
  const auto* a_bytes = static_cast<const std::byte*>(cow.data(a));
  const auto* b_bytes = static_cast<const std::byte*>(cow.data(b));
  if (st::mapped_pages_written(a_bytes, a.nbytes()) == st::PageWrites::unknown) {
    GTEST_SKIP() << "this kernel or sandbox hides /proc/self/pagemap: the records' fingerprints decide instead";
  }
  EXPECT_EQ(st::mapped_pages_written(a_bytes, a.nbytes()), st::PageWrites::clean);
  float sum = 0;
  for (std::int64_t i = 0; i < kElements; ++i) sum += reinterpret_cast<const float*>(b_bytes)[i];  // a read
  EXPECT_EQ(sum, static_cast<float>(kElements));
  EXPECT_EQ(st::mapped_pages_written(b_bytes, b.nbytes()), st::PageWrites::clean);
  // One float in the middle of b: b is written, a (its own pages) is not, nor b's first half.
  auto* b_floats = reinterpret_cast<float*>(cow.mutable_data(b));
  b_floats[kElements / 2 + 7] = 2.0F;
  EXPECT_EQ(st::mapped_pages_written(b_bytes, b.nbytes()), st::PageWrites::written);
  EXPECT_EQ(st::mapped_pages_written(b_bytes + b.nbytes() / 2 + 64, 4), st::PageWrites::written);
  EXPECT_EQ(st::mapped_pages_written(a_bytes, a.nbytes() - 4096), st::PageWrites::clean);
  EXPECT_EQ(st::mapped_pages_written(b_bytes + 4096, b.nbytes() / 2 - 8192), st::PageWrites::clean);
  // Released: the file's bytes come back, and the pages are clean again.
  EXPECT_GT(st::release_mapped_pages(b_bytes, b.nbytes()), 0u);
  EXPECT_EQ(st::mapped_pages_written(b_bytes + 4096, b.nbytes() - 8192), st::PageWrites::clean);
  EXPECT_EQ(b_floats[kElements / 2 + 7], 1.0F);
  // Memory of no map: the page table is not asked.
  std::vector<float> heap(1024, 1.0F);
  EXPECT_EQ(st::mapped_pages_written(heap.data(), heap.size() * sizeof(float)), st::PageWrites::unknown);
}

TEST_F(CheckpointFileTest, OnlyStreamsTensorsMatchingAPrefix) {
  const std::string path = path_of("prefix.safetensors");
  std::vector<NamedTensor> tensors;
  for (const char* name : {"layers.0.a", "layers.0.b", "layers.1.a", "layers.10.a", "head.w"}) {
    tensors.push_back({name, torch::ones({2})});
  }
  save_checkpoint(path, tensors);

  auto names = [&](std::vector<std::string> only) {
    SafetensorsWeightStream stream(path, std::move(only));
    std::set<std::string> out;
    for (const auto& [name, tensor] : drain(stream)) out.insert(name);
    return out;
  };
  EXPECT_THAT(names({}), ElementsAre("head.w", "layers.0.a", "layers.0.b", "layers.1.a",
                                     "layers.10.a"));
  EXPECT_THAT(names({"layers.1."}), ElementsAre("layers.1.a"));
  EXPECT_THAT(names({"layers.0.", "head."}), ElementsAre("head.w", "layers.0.a", "layers.0.b"));
  EXPECT_THAT(names({"layers.1"}), ElementsAre("layers.1.a", "layers.10.a"));  // a plain prefix
  EXPECT_TRUE(names({"nothing."}).empty());
}

TEST(CheckpointPrefix, MatchesAnyPrefix) {
  EXPECT_TRUE(matches_any_prefix("layers.0.w", {}));  // no prefixes: everything
  EXPECT_TRUE(matches_any_prefix("layers.0.w", {"head.", "layers.0."}));
  EXPECT_TRUE(matches_any_prefix("layers.0.w", {"layers.0.w"}));
  EXPECT_FALSE(matches_any_prefix("layers.0.w", {"layers.1."}));
  EXPECT_FALSE(matches_any_prefix("layers", {"layers.0."}));  // prefix longer than the name
  EXPECT_FALSE(matches_any_prefix("head.w", {"ead."}));
}

TEST(CheckpointTensorListStream, StreamsInOrderThenStops) {
  TensorListWeightStream stream({{"a", torch::ones({1})}, {"b", torch::zeros({2})}}, "list 'x'");
  EXPECT_EQ(stream.source(), "list 'x'");
  auto first = stream.next();
  auto second = stream.next();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->name, "a");
  EXPECT_EQ(second->name, "b");
  EXPECT_TRUE(torch::equal(second->tensor, torch::zeros({2})));
  EXPECT_FALSE(stream.next().has_value());
}

// ---- dtypes -----------------------------------------------------------------------------------

TEST(CheckpointDtype, EverySafetensorsDtypeRoundTrips) {
  for (st::Dtype dtype : st::all_dtypes()) {
    SCOPED_TRACE(std::string(st::dtype_name(dtype)));
    const c10::ScalarType scalar = to_scalar_type(dtype);
#if GRAPHCHECK_HAS_FLOAT8_E8M0
    EXPECT_EQ(to_safetensors_dtype(scalar), dtype);
#else
    EXPECT_EQ(to_safetensors_dtype(scalar), dtype == st::Dtype::E8M0 ? st::Dtype::U8 : dtype);
#endif
    // Element sizes agree, so the bytes of a file map one to one onto the tensor.
    EXPECT_EQ(c10::elementSize(scalar), st::dtype_size(dtype));
  }
}

TEST(CheckpointDtype, TorchDtypesMapOntoTheExpectedSafetensorsDtypes) {
  for (const auto& c : round_trip_cases()) {
    SCOPED_TRACE(c.header_name);
    const st::Dtype dtype = to_safetensors_dtype(c.dtype);
    EXPECT_EQ(st::dtype_name(dtype), c.header_name);
    EXPECT_EQ(to_scalar_type(dtype), c.dtype);
  }
  EXPECT_EQ(to_scalar_type(st::Dtype::U16), c10::ScalarType::UInt16);
  EXPECT_EQ(to_scalar_type(st::Dtype::U32), c10::ScalarType::UInt32);
  EXPECT_EQ(to_scalar_type(st::Dtype::U64), c10::ScalarType::UInt64);
}

TEST(CheckpointDtype, UnsupportedDtypeNamesIt) {
  try {
    (void)to_safetensors_dtype(torch::kComplexFloat);
    ADD_FAILURE() << "complex64 has no safetensors dtype";
  } catch (const st::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("ComplexFloat"));
    EXPECT_THAT(e.what(), HasSubstr("no safetensors equivalent"));
  }
}

TEST_F(CheckpointFileTest, SavingAnUnsupportedDtypeThrowsAndWritesNothing) {
  const std::string path = path_of("complex.safetensors");
  try {
    save_checkpoint(path,
                    {{"ok", torch::ones({2})}, {"c", torch::ones({2}, torch::kComplexFloat)}});
    ADD_FAILURE() << "saved a complex64 tensor";
  } catch (const st::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("ComplexFloat"));
  }
  EXPECT_FALSE(fs::exists(path));
}

// ---- bad files --------------------------------------------------------------------------------

TEST_F(CheckpointFileTest, TruncatedFileIsRejectedNamingTheFile) {
  const std::string path = path_of("truncated.safetensors");
  save_checkpoint(path, {{"w", torch::arange(1000, torch::kFloat32)}, {"b", torch::ones({10})}});
  ASSERT_NO_THROW(SafetensorsWeightStream{path});
  fs::resize_file(path, fs::file_size(path) / 2);
  try {
    SafetensorsWeightStream stream(path);
    ADD_FAILURE() << "opened a truncated checkpoint";
  } catch (const st::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

TEST_F(CheckpointFileTest, MissingFileIsRejectedNamingTheFile) {
  const std::string path = path_of("missing.safetensors");
  try {
    SafetensorsWeightStream stream(path);
    ADD_FAILURE() << "opened a missing checkpoint";
  } catch (const st::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

// ---- the model helpers ------------------------------------------------------------------------

// Parameter "w" [2, 3], persistent buffer "b" [3], non-persistent buffer "cache" [4], and a plain
// member "derived" declared through extra_tensors().
class TinyCheckpointModel : public LifecycleModel {
 public:
  TinyCheckpointModel() {
    m_w = m_module.register_parameter("w", torch::zeros({2, 3}));  // requires_grad: true
    m_b = m_module.register_buffer("b", torch::zeros({3}));
    m_cache = m_module.register_buffer("cache", torch::full({4}, 7.0));
    m_derived = torch::zeros({3});
    TensorAttrs attrs;
    attrs.persistent = false;
    tensor_attributes().set(m_cache, attrs);
  }

  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    return load_module_weights(*this, weights);
  }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& input) override { return input.matmul(m_w) + m_b; }
  torch::Tensor make_input(std::int64_t batch_size, std::uint64_t seed) override {
    return torch::full({batch_size, 2}, static_cast<double>(seed));
  }
  std::vector<NamedTensor> extra_tensors() override { return {{"derived", m_derived}}; }

  torch::nn::Module m_module;
  torch::Tensor m_w;
  torch::Tensor m_b;
  torch::Tensor m_cache;
  torch::Tensor m_derived;
};

// A nested module with integer and bool buffers, for synthesize_checkpoint.
class MixedModel : public LifecycleModel {
 public:
  MixedModel() {
    m_child = m_module.register_module("child", std::make_shared<torch::nn::Module>());
    m_child->register_parameter("weight", torch::zeros({4, 5}, torch::kFloat64), false);
    m_child->register_buffer("steps", torch::zeros({6}, torch::kInt64));
    m_child->register_buffer("scale", torch::zeros({6}, torch::kUInt8));
    m_module.register_buffer("mask", torch::zeros({3, 3}, torch::kBool));
    m_module.register_parameter("half", torch::zeros({8}, torch::kBFloat16), false);
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    return load_module_weights(*this, weights);
  }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& input) override { return input; }
  torch::Tensor make_input(std::int64_t batch_size, std::uint64_t) override {
    return torch::zeros({batch_size, 1});
  }

  torch::nn::Module m_module;
  std::shared_ptr<torch::nn::Module> m_child;
};

std::vector<std::string> names_of(const std::vector<NamedTensor>& tensors) {
  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t.name);
  return names;
}

// Runs `load` and returns the CheckpointMismatch message; a test failure when nothing throws.
template <typename Load>
std::string mismatch_of(Load load) {
  try {
    load();
  } catch (const CheckpointMismatch& e) {
    return e.what();
  }
  ADD_FAILURE() << "no CheckpointMismatch";
  return {};
}

TEST_F(CheckpointFileTest, LoadModuleWeightsLoadsInPlace) {
  TinyCheckpointModel model;
  const torch::Tensor w = torch::arange(6, torch::kFloat32).reshape({2, 3});
  const torch::Tensor b = torch::tensor({1.0f, 2.0f, 3.0f});
  const std::string path = path_of("tiny.safetensors");
  save_checkpoint(path, {{"w", w}, {"b", b}});

  const void* w_address = model.m_w.data_ptr();
  const void* b_address = model.m_b.data_ptr();
  SafetensorsWeightStream stream(path);
  EXPECT_THAT(model.load_weights(stream), ElementsAre("b", "w"));

  EXPECT_EQ(model.m_w.data_ptr(), w_address);
  EXPECT_EQ(model.m_b.data_ptr(), b_address);
  EXPECT_TRUE(model.m_module.named_parameters()["w"].is_same(model.m_w));
  EXPECT_TRUE(model.m_w.requires_grad());
  EXPECT_TRUE(torch::equal(model.m_w, w));
  EXPECT_TRUE(torch::equal(model.m_b, b));
  EXPECT_TRUE(torch::equal(model.m_cache, torch::full({4}, 7.0)));  // untouched
}

TEST(CheckpointModel, PartialStreamLoadsOnlyWhatItCarries) {
  TinyCheckpointModel model;
  TensorListWeightStream stream({{"b", torch::tensor({4.0f, 5.0f, 6.0f})}}, "refit bucket");
  EXPECT_THAT(load_module_weights(model, stream), ElementsAre("b"));
  EXPECT_TRUE(torch::equal(model.m_b, torch::tensor({4.0f, 5.0f, 6.0f})));
  EXPECT_TRUE(torch::equal(model.m_w, torch::zeros({2, 3})));
}

TEST_F(CheckpointFileTest, UnknownNameIsAMismatchNamingTensorAndSource) {
  TinyCheckpointModel model;
  const std::string path = path_of("unknown.safetensors");
  save_checkpoint(path, {{"w", torch::ones({2, 3})}, {"v", torch::ones({2, 3})}});
  SafetensorsWeightStream stream(path);
  const std::string message = mismatch_of([&] { (void)load_module_weights(model, stream); });
  EXPECT_THAT(message, HasSubstr("checkpoint '" + path + "'"));
  EXPECT_THAT(message, HasSubstr("tensor 'v' matches no tensor of the model's checkpoint layout"));
}

TEST(CheckpointModel, ShapeMismatchNamesTensorShapesAndSource) {
  TinyCheckpointModel model;
  TensorListWeightStream stream({{"w", torch::ones({3, 2})}}, "stream 'shapes'");
  const std::string message = mismatch_of([&] { (void)load_module_weights(model, stream); });
  EXPECT_THAT(message, HasSubstr("stream 'shapes'"));
  EXPECT_THAT(message, HasSubstr("tensor 'w' has shape [3, 2] in the checkpoint but [2, 3] in the "
                                 "model"));
  EXPECT_TRUE(torch::equal(model.m_w, torch::zeros({2, 3})));
}

TEST(CheckpointModel, DtypeMismatchNamesTensorDtypesAndSource) {
  TinyCheckpointModel model;
  TensorListWeightStream stream({{"w", torch::ones({2, 3}, torch::kFloat64)}}, "stream 'dtypes'");
  const std::string message = mismatch_of([&] { (void)load_module_weights(model, stream); });
  EXPECT_THAT(message, HasSubstr("stream 'dtypes'"));
  EXPECT_THAT(message, HasSubstr("tensor 'w' has dtype Double in the checkpoint but Float in the "
                                 "model"));
  EXPECT_TRUE(torch::equal(model.m_w, torch::zeros({2, 3})));
}

TEST(CheckpointModel, NonPersistentBufferInTheCheckpointIsRejected) {
  TinyCheckpointModel model;
  TensorListWeightStream stream({{"cache", torch::zeros({4})}}, "stream 'np'");
  const std::string message = mismatch_of([&] { (void)load_module_weights(model, stream); });
  EXPECT_THAT(message, HasSubstr("stream 'np'"));
  EXPECT_THAT(message, HasSubstr("tensor 'cache' is a non-persistent buffer"));
  EXPECT_TRUE(torch::equal(model.m_cache, torch::full({4}, 7.0)));
}

TEST(CheckpointModel, CheckpointTensorsExcludeNonPersistentBuffers) {
  TinyCheckpointModel model;
  const auto checkpoint = checkpoint_tensors(model);
  EXPECT_THAT(names_of(checkpoint), ElementsAre("w", "b"));
  EXPECT_TRUE(checkpoint[0].tensor.is_same(model.m_w));
  EXPECT_TRUE(checkpoint[1].tensor.is_same(model.m_b));

  const auto live = live_tensors(model);
  EXPECT_THAT(names_of(live), ElementsAre("w", "b", "cache", "derived"));
  EXPECT_TRUE(live[2].tensor.is_same(model.m_cache));
  EXPECT_TRUE(live[3].tensor.is_same(model.m_derived));
}

TEST(CheckpointModel, WeightLoaderReplacesTheCopy) {
  TinyCheckpointModel model;
  int calls = 0;
  const void* seen = nullptr;
  TensorAttrs attrs;
  attrs.weight_loader = [&](torch::Tensor& param, const torch::Tensor& loaded) {
    ++calls;
    seen = param.data_ptr();
    param.copy_(loaded * 2);
  };
  model.tensor_attributes().set(model.m_w, attrs);

  const torch::Tensor w = torch::arange(6, torch::kFloat32).reshape({2, 3});
  const torch::Tensor b = torch::tensor({1.0f, 2.0f, 3.0f});
  const void* w_address = model.m_w.data_ptr();
  TensorListWeightStream stream({{"w", w}, {"b", b}}, "stream 'loader'");
  EXPECT_THAT(load_module_weights(model, stream), ElementsAre("b", "w"));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, w_address);  // the loader got the live tensor
  EXPECT_EQ(model.m_w.data_ptr(), w_address);
  EXPECT_TRUE(torch::equal(model.m_w, w * 2));
  EXPECT_TRUE(torch::equal(model.m_b, b));  // no loader: plain copy
}

TEST(CheckpointModel, WeightLoaderMayConvertTheDtype) {
  // The dtype-mismatch message suggests "a weight_loader that converts": that must work.
  TinyCheckpointModel model;
  TensorAttrs attrs;
  attrs.weight_loader = [](torch::Tensor& param, const torch::Tensor& loaded) {
    param.copy_(loaded.to(param.scalar_type()));
  };
  model.tensor_attributes().set(model.m_w, attrs);
  TensorListWeightStream stream({{"w", torch::full({2, 3}, 1.5, torch::kFloat64)}}, "s");
  EXPECT_THAT(load_module_weights(model, stream), ElementsAre("w"));
  EXPECT_TRUE(torch::equal(model.m_w, torch::full({2, 3}, 1.5f)));
}

TEST(CheckpointTensorAttributes, KeyedByTensorIdentity) {
  TinyCheckpointModel model;
  const TensorAttrs* cache = model.tensor_attributes().find(model.m_cache);
  ASSERT_NE(cache, nullptr);
  EXPECT_FALSE(cache->persistent);
  EXPECT_EQ(model.tensor_attributes().find(model.m_w), nullptr);
  EXPECT_EQ(model.tensor_attributes().find(torch::Tensor()), nullptr);
  // A view or a copy is another tensor: no attributes.
  EXPECT_EQ(model.tensor_attributes().find(model.m_cache.view({2, 2})), nullptr);
  EXPECT_EQ(model.tensor_attributes().find(model.m_cache.clone()), nullptr);
  // Another handle to the same tensor shares them.
  const torch::Tensor alias = model.m_cache;
  EXPECT_EQ(model.tensor_attributes().find(alias), cache);

  TensorAttrs value;
  value.dummy_weight_value = 127.0;
  model.tensor_attributes().set(model.m_cache, value);  // replaces
  const TensorAttrs* replaced = model.tensor_attributes().find(model.m_cache);
  ASSERT_NE(replaced, nullptr);
  EXPECT_TRUE(replaced->persistent);
  EXPECT_EQ(replaced->dummy_weight_value, 127.0);
}

TEST(CheckpointModel, SynthesizeCheckpointIsDeterministicInTheSeed) {
  TinyCheckpointModel model;
  const auto a = model.synthesize_checkpoint(5);
  torch::manual_seed(99);  // the global generator must not matter
  (void)torch::randn({16});
  const auto again = model.synthesize_checkpoint(5);
  const auto other = model.synthesize_checkpoint(6);

  const auto expected = checkpoint_tensors(model);
  ASSERT_EQ(names_of(a), names_of(expected));
  ASSERT_EQ(names_of(again), names_of(expected));
  ASSERT_EQ(names_of(other), names_of(expected));
  bool any_difference = false;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(a[i].tensor.sizes(), expected[i].tensor.sizes());
    EXPECT_EQ(a[i].tensor.scalar_type(), expected[i].tensor.scalar_type());
    EXPECT_TRUE(torch::equal(a[i].tensor, again[i].tensor));
    EXPECT_FALSE(a[i].tensor.is_same(expected[i].tensor)) << "must be new tensors";
    if (!torch::equal(a[i].tensor, other[i].tensor)) any_difference = true;
  }
  EXPECT_TRUE(any_difference) << "seeds 5 and 6 gave the same checkpoint";
  EXPECT_TRUE(torch::equal(model.m_w, torch::zeros({2, 3}))) << "synthesizing must not load";
}

// Note [One slab per synthesis]: in a SynthesisSlabs scope a synthesis takes the last one's block
// only once nothing holds the last one's tensors; values a caller still holds never change, and
// a synthesis in a reused block draws what one in fresh memory draws (float64, bfloat16 and the
// integer and bool tensors beside them).
TEST(CheckpointModel, ASynthesisReusesTheLastSlabOnlyOnceNothingHoldsIt) {
  MixedModel model;
  const auto plain5 = model.synthesize_checkpoint(5);
  const auto plain6 = model.synthesize_checkpoint(6);
  const auto equal_to = [](const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want) {
    if (got.size() != want.size()) return false;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i].name != want[i].name || !torch::equal(got[i].tensor, want[i].tensor)) return false;
    }
    return true;
  };
  SynthesisSlabs slabs;
  auto a = model.synthesize_checkpoint(5);
  ASSERT_TRUE(slabs.slab.defined());
  const void* first = slabs.slab.data_ptr();
  auto b = model.synthesize_checkpoint(6);  // a is held: b needs a block of its own
  EXPECT_NE(slabs.slab.data_ptr(), first);
  EXPECT_TRUE(equal_to(a, plain5)) << "a synthesis overwrote tensors the caller still holds";
  EXPECT_TRUE(equal_to(b, plain6));
  a.clear();
  b.clear();
  const void* second = slabs.slab.data_ptr();
  const auto c = model.synthesize_checkpoint(5);
  EXPECT_EQ(slabs.slab.data_ptr(), second) << "nothing held the last block, yet a new one was taken";
  EXPECT_TRUE(equal_to(c, plain5));
}

// 16- and 64-bit tensors are drawn in float32 a chunk at a time and converted: the values are a
// whole float32 draw's, converted once. Tensors of several chunks, the last one odd.
TEST(CheckpointModel, SynthesizedTensorsOfOtherDtypesAreTheFloat32DrawConverted) {
  class Wide : public LifecycleModel {
   public:
    Wide() {
      m_module.register_parameter("b", torch::zeros({7, 13337}, torch::kBFloat16), false);
      m_module.register_parameter("h", torch::zeros({40001}, torch::kFloat16), false);
      m_module.register_parameter("d", torch::zeros({5, 20001}, torch::kFloat64), false);
      m_module.register_parameter("f", torch::zeros({3, 33333}, torch::kFloat32), false);
    }
    torch::nn::Module& module() override { return m_module; }
    std::set<std::string> load_weights(WeightStream& weights) override { return load_module_weights(*this, weights); }
    void process_weights_after_loading() override {}
    torch::Tensor forward(const torch::Tensor& input) override { return input; }
    torch::Tensor make_input(std::int64_t batch_size, std::uint64_t) override { return torch::zeros({batch_size, 1}); }
    torch::nn::Module m_module;
  };
  Wide model;
  const auto synthesized = model.synthesize_checkpoint(11);
  ASSERT_EQ(synthesized.size(), 4u);
  for (std::size_t i = 0; i < synthesized.size(); ++i) {
    const torch::Tensor& t = synthesized[i].tensor;
    SCOPED_TRACE(synthesized[i].name);
    const double std = t.dim() >= 2 ? 1.0 / std::sqrt(static_cast<double>(t.size(-1))) : 0.5;
    torch::Tensor floats = torch::empty(t.sizes(), torch::kFloat32);
    synth::fill_uniform(floats.data_ptr<float>(), static_cast<std::size_t>(floats.numel()), synth::stream_key(11, i),
                        static_cast<float>(std::sqrt(3.0) * std));
    EXPECT_TRUE(torch::equal(t, floats.to(t.scalar_type())));
  }
}

TEST_F(CheckpointFileTest, SynthesizedCheckpointCoversMixedDtypesAndLoads) {
  MixedModel model;
  const auto synthesized = model.synthesize_checkpoint(3);
  const auto expected = checkpoint_tensors(model);
  EXPECT_THAT(names_of(expected),
              UnorderedElementsAre("half", "child.weight", "mask", "child.steps", "child.scale"));
  ASSERT_EQ(names_of(synthesized), names_of(expected));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(synthesized[i].tensor.sizes(), expected[i].tensor.sizes());
    EXPECT_EQ(synthesized[i].tensor.scalar_type(), expected[i].tensor.scalar_type());
    EXPECT_TRUE(synthesized[i].tensor.is_contiguous());
  }

  // Integers are drawn from a small range: [0, 8).
  for (const auto& t : synthesized) {
    if (t.name == "child.steps" || t.name == "child.scale") {
      EXPECT_GE(t.tensor.min().item<std::int64_t>(), 0) << t.name;
      EXPECT_LT(t.tensor.max().item<std::int64_t>(), 8) << t.name;
    }
  }

  // The synthesized checkpoint is one the model accepts.
  const std::string path = path_of("mixed.safetensors");
  save_checkpoint(path, synthesized);
  SafetensorsWeightStream stream(path);
  EXPECT_EQ(load_module_weights(model, stream).size(), expected.size());
  for (const auto& t : synthesized) {
    SCOPED_TRACE(t.name);
    for (const auto& live : checkpoint_tensors(model)) {
      if (live.name == t.name) {
        EXPECT_TRUE(same_bytes(t.tensor, live.tensor));
      }
    }
  }
}

// ---- checkpoint names vs live names ------------------------------------------------------

// q/k/v in the checkpoint, one fused qkv live parameter (vLLM's stacked_params_mapping).
class StackedModel : public LifecycleModel {
 public:
  explicit StackedModel(std::vector<CheckpointShard> mapping = {}) : m_mapping(std::move(mapping)) {
    m_qkv = m_module.register_parameter("qkv", torch::zeros({6, 2}), false);
    m_o = m_module.register_parameter("o", torch::zeros({2, 2}), false);
    if (m_mapping.empty()) m_mapping = stacked_shards("qkv", 0, {{"q", 2}, {"k", 2}, {"v", 2}});
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    return load_module_weights(*this, weights);
  }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& input) override { return input; }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::zeros({b, 2}); }
  std::vector<CheckpointShard> checkpoint_mapping() override { return m_mapping; }

  torch::nn::Module m_module;
  torch::Tensor m_qkv, m_o;
  std::vector<CheckpointShard> m_mapping;
};

TEST(CheckpointMapping, LayoutReplacesAFusedTensorByItsShards) {
  StackedModel model;
  const auto layout = checkpoint_layout(model);
  std::vector<std::string> names;
  for (const auto& e : layout) names.push_back(e.checkpoint);
  EXPECT_EQ(names, (std::vector<std::string>{"q", "k", "v", "o"}));
  EXPECT_TRUE(layout[1].sharded);
  EXPECT_EQ(layout[1].live, "qkv");
  EXPECT_EQ(layout[1].region.data_ptr(), static_cast<char*>(model.m_qkv.data_ptr()) + 2 * 2 * 4);
  EXPECT_EQ(layout[1].describe(), "'k' (rows 2..3 along dim 0 of 'qkv')");
  EXPECT_FALSE(layout[3].sharded);
}

TEST(CheckpointMapping, DefaultLoaderFillsShardsAndReportsLiveNames) {
  StackedModel model;
  TensorListWeightStream stream({{"q", torch::full({2, 2}, 1.0)}, {"k", torch::full({2, 2}, 2.0)},
                                 {"v", torch::full({2, 2}, 3.0)}, {"o", torch::full({2, 2}, 4.0)}},
                                "test stream");
  const auto loaded = load_module_weights(model, stream);
  EXPECT_EQ(loaded, (std::set<std::string>{"qkv", "o"}));
  EXPECT_TRUE(torch::equal(model.m_qkv.narrow(0, 4, 2), torch::full({2, 2}, 3.0)));
  EXPECT_TRUE(torch::equal(model.m_qkv.narrow(0, 0, 2), torch::full({2, 2}, 1.0)));
}

TEST(CheckpointMapping, SynthesizedCheckpointUsesCheckpointNames) {
  StackedModel model;
  std::vector<std::string> names;
  for (const auto& t : model.synthesize_checkpoint(3)) {
    names.push_back(t.name);
    EXPECT_EQ(t.tensor.sizes(), (std::vector<std::int64_t>{2, 2})) << t.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"q", "k", "v", "o"}));
}

TEST(CheckpointMapping, FusedNameInACheckpointIsExplained) {
  StackedModel model;
  const std::string message = mismatch_of([&] {
    TensorListWeightStream stream({{"qkv", torch::zeros({6, 2})}}, "test stream");
    (void)load_module_weights(model, stream);
  });
  EXPECT_NE(message.find("fused live tensor"), std::string::npos) << message;
  EXPECT_NE(message.find("checkpoint_mapping()"), std::string::npos) << message;
}

TEST(CheckpointMapping, BadMappingsAreConfigErrorsNamingTheShard) {
  auto error_of = [](std::vector<CheckpointShard> mapping) {
    StackedModel model(std::move(mapping));
    try {
      (void)checkpoint_layout(model);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "no ConfigError";
    return std::string();
  };
  EXPECT_NE(error_of({{"q", "qkv", 0, 4, 4}}).find("outside the live tensor's shape [6, 2]"), std::string::npos);
  EXPECT_NE(error_of({{"q", "qkv", 2, 0, 1}}).find("shard 'q' of 'qkv'"), std::string::npos);
  EXPECT_NE(error_of({{"q", "qkv", 0, 0, 3}, {"k", "qkv", 0, 2, 2}}).find("overlaps"), std::string::npos);
  EXPECT_NE(error_of({{"q", "qkvz", 0, 0, 2}}).find("names live tensor 'qkvz'"), std::string::npos);
  // Layout transforms: a permutation of the live region's dims, once each.
  CheckpointShard bad_permute = transposed_shard("q", "qkv");
  bad_permute.permute = {0, 0};
  EXPECT_NE(error_of({bad_permute}).find("permutes dims (0, 0), which is no permutation"), std::string::npos);
  CheckpointShard three_dims = transposed_shard("q", "qkv");
  three_dims.permute = {2, 0, 1};
  EXPECT_NE(error_of({three_dims}).find("no permutation of the 2 dims"), std::string::npos);
  CheckpointShard offset_whole = transposed_shard("q", "qkv");
  offset_whole.offset = 2;
  EXPECT_NE(error_of({offset_whole}).find("whole-dim shard starts at offset 0"), std::string::npos);
}

// Issue 25 item 5: a live [in, out] tensor holding a checkpoint's [out, in] transposed. Every
// region the engine hands out (synthesis, the census, model B, the default loader) is in the
// checkpoint's orientation, and messages say how it is stored.
TEST(CheckpointMapping, TransposedEntryIsSeenInTheCheckpointsOrientation) {
  StackedModel model({transposed_shard("qkv_t", "qkv"), {"o_rows", "o", 0, 0, 1, -1, {1, 0}}});
  const auto layout = checkpoint_layout(model);
  ASSERT_EQ(layout.size(), 2u);
  const CheckpointEntry& whole = layout[0];
  EXPECT_EQ(whole.checkpoint, "qkv_t");
  EXPECT_FALSE(whole.sharded);
  EXPECT_EQ(whole.region.sizes(), (std::vector<std::int64_t>{2, 6}));  // the checkpoint's shape
  EXPECT_EQ(whole.describe(), "'qkv_t' (stored transposed in 'qkv')");
  const CheckpointEntry& row = layout[1];
  EXPECT_TRUE(row.sharded);
  EXPECT_EQ(row.region.sizes(), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(row.describe(), "'o_rows' (rows 0..0 along dim 0 of 'o', stored transposed)");

  // The default loader writes through the transposed view; synthesis gives checkpoint shapes.
  const torch::Tensor ckpt = torch::arange(12, torch::kFloat32).reshape({2, 6});
  TensorListWeightStream stream({{"qkv_t", ckpt}, {"o_rows", torch::tensor({{7.0f}, {8.0f}})}}, "test stream");
  EXPECT_EQ(load_module_weights(model, stream), (std::set<std::string>{"qkv", "o"}));
  EXPECT_TRUE(torch::equal(model.m_qkv, ckpt.t()));
  EXPECT_TRUE(torch::equal(model.m_o.narrow(0, 0, 1), torch::tensor({{7.0f, 8.0f}})));
  for (const auto& t : model.synthesize_checkpoint(5)) {
    if (t.name == "qkv_t") {
      EXPECT_EQ(t.tensor.sizes(), (std::vector<std::int64_t>{2, 6}));
    }
  }
  // Model B's tensor, through the same entry.
  const torch::Tensor other = torch::randn({6, 2});
  EXPECT_TRUE(torch::equal(whole.region_of(other), other.t()));
}

// Note [A live tensor under a checkpoint name]: a staging parameter the model registers under a
// checkpoint name its mapping gives to a shard of another tensor (stage_for_refit(): the loader
// writes the checkpoint's layout, PWAL folds it into the kernel's) is where that name loads while
// it exists; the kernel tensor's other shards stay mapped.
TEST(CheckpointMapping, AStagingTensorUnderACheckpointNameTakesItWhileItExists) {
  StackedModel model({transposed_shard("qkv_t", "qkv"), {"o_rows", "o", 0, 0, 1, -1, {1, 0}}});
  const torch::Tensor staging = model.m_module.register_parameter("qkv_t", torch::zeros({2, 6}), false);
  const auto layout = checkpoint_layout(model);
  std::vector<std::string> entries;
  for (const auto& e : layout) entries.push_back(e.checkpoint + " -> " + e.live);
  EXPECT_EQ(entries, (std::vector<std::string>{"o_rows -> o", "qkv_t -> qkv_t"}));
  for (const auto& e : layout) {
    if (e.checkpoint == "qkv_t") {
      EXPECT_EQ(e.region.data_ptr(), staging.data_ptr());
    }
  }
}

using graphcheck::testing::resident_kb_of_file;
using graphcheck::testing::resident_kb_of_map;

// Note [Settled as the load goes]: the records a loader let go settle while it streams, and
// their pages leave the resident set before the load ends; a record the loader wrote is read
// again, one it keeps is copied at the end, and each holds the checkpoint's bytes.
TEST_F(CheckpointFileTest, RecordsSettleAsTheLoadGoesAndTheirPagesLeaveTheResidentSet) {
  constexpr std::int64_t kElements = std::int64_t{1} << 20;  // 4 MiB each
  std::vector<NamedTensor> tensors;
  for (const char* name : {"a", "b", "c", "d"}) {
    tensors.push_back({name, torch::arange(kElements, torch::kFloat32) * static_cast<float>(name[0])});
  }
  const std::string path = path_of("four.safetensors");
  save_checkpoint(path, tensors, {}, st::Durability::scratch);
  SafetensorsWeightStream source(path, {}, {}, StreamReads::mapped);
  std::map<std::string, torch::Tensor> into;
  double harness = 0;
  engine::RecordingStream stream(source, into, harness, /*copy=*/false, [&](const std::string& name) {
    for (const auto& t : tensors) {
      if (t.name == name) return t.tensor.clone();
    }
    throw std::logic_error(name);
  });
  torch::Tensor live = torch::empty({kElements});
  auto a = stream.next();  // copied into a parameter, then let go
  live.copy_(a->tensor);
  const void* map = a->tensor.data_ptr();
  a.reset();
  auto b = stream.next();  // written in place (a loader that scales what it is streamed)
  b->tensor.mul_(2);
  b.reset();
  auto c = stream.next();  // kept
  const torch::Tensor kept = c->tensor;
  c.reset();
  auto d = stream.next();
  live.copy_(d->tensor);
  d.reset();
  EXPECT_FALSE(stream.next());
  EXPECT_EQ(stream.settled_early(), 3u);  // a, b and d; c is held
  // Only the kept tensor's pages (and at most a page at each edge) are resident before finish().
  EXPECT_LE(resident_kb_of_map(map), 4096 + 16);
  EXPECT_GE(resident_kb_of_map(map), 4096 - 16);

  const auto streamed = stream.finish();
  ASSERT_EQ(streamed.size(), 4u);
  for (const auto& t : tensors) EXPECT_TRUE(same_bytes(t.tensor, into.at(t.name))) << t.name;
  EXPECT_TRUE(same_bytes(tensors[2].tensor, kept));
  EXPECT_NE(into.at("c").data_ptr(), kept.data_ptr());  // the kept one is copied
  EXPECT_NE(into.at("b").data_ptr(), tensors[1].tensor.data_ptr());
}

// The lifecycle's reread of a generated checkpoint (a record the loader wrote is read again):
// the file is opened once for the load, not once per tensor (an open per tensor made a load that
// writes every tensor quadratic). Seen here by what it serves: the file as it was when the reread
// was made, even after the path names another file; and each tensor's own bytes.
TEST_F(CheckpointFileTest, RereadOpensTheFileOnceForTheWholeLoad) {
  constexpr std::int64_t kElements = std::int64_t{1} << 20;  // 4 MiB each
  std::vector<NamedTensor> first, second;
  for (const char* name : {"a", "b", "c"}) {
    first.push_back({name, torch::arange(kElements, torch::kFloat32) + static_cast<float>(name[0])});
    second.push_back({name, torch::zeros({kElements})});
  }
  const std::string path = path_of("reread.safetensors");
  save_checkpoint(path, first, {}, st::Durability::scratch);
  const engine::RecordingStream::Reread reread = engine::reread_from_file(path);
  EXPECT_TRUE(same_bytes(reread("b"), first[1].tensor));
  save_checkpoint(path, second, {}, st::Durability::scratch);  // a new file under the same name
  const torch::Tensor a = reread("a");
  const torch::Tensor c = reread("c");
  EXPECT_TRUE(same_bytes(a, first[0].tensor));
  EXPECT_TRUE(same_bytes(c, first[2].tensor));
  EXPECT_FALSE(same_bytes(c, second[2].tensor));
  try {
    (void)reread("z");
    ADD_FAILURE() << "a name the file does not hold was read";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("'z' vanished from"), std::string::npos) << e.what();
  }
}

// The reread hands a run of neighbouring tensors' pages back in one call, once a tensor read lies
// elsewhere, and its map goes with it: a load that writes every tensor does not keep the file
// resident beside the model, nor fault a shared page in again for each neighbour.
TEST_F(CheckpointFileTest, RereadHandsBackEachRunOfNeighboursOnceAReadLiesElsewhere) {
  constexpr std::int64_t kElements = std::int64_t{1} << 20;  // 4 MiB each
  std::vector<NamedTensor> tensors;
  for (const char* name : {"a", "b", "c"}) tensors.push_back({name, torch::full({kElements}, 1.0F)});
  const std::string path = std::filesystem::absolute(path_of("runs.safetensors")).string();
  save_checkpoint(path, tensors, {}, st::Durability::scratch);
  // The kernel maps up to 64 KiB around a faulting page (fault-around), at either edge of a run.
  constexpr std::int64_t kSlackKb = 128;
  auto reread = std::make_unique<engine::RecordingStream::Reread>(engine::reread_from_file(path));
  (void)(*reread)("a");
  EXPECT_GE(resident_kb_of_file(path), 4096 - kSlackKb);  // a's pages, copied, kept while its run lasts
  (void)(*reread)("c");                            // not a's neighbour: a's run goes back
  EXPECT_LE(resident_kb_of_file(path), 4096 + kSlackKb);
  EXPECT_GE(resident_kb_of_file(path), 4096 - kSlackKb);
  (void)(*reread)("b");  // c's neighbour: one run, b and c
  EXPECT_GE(resident_kb_of_file(path), 8192 - kSlackKb);
  EXPECT_LE(resident_kb_of_file(path), 8192 + kSlackKb);
  reread.reset();
  EXPECT_EQ(resident_kb_of_file(path), 0);
}

}  // namespace
}  // namespace graphcheck
