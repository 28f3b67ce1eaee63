// Round trips between graphcheck's safetensors reader/writer and the reference implementation
// (Python's `safetensors` package with numpy).
//
// GRAPHCHECK_PYTHON names a Python interpreter that can `import safetensors, numpy`. When it is
// empty or cannot, every test here is skipped with the reason.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "graphcheck/safetensors.h"

#ifndef GRAPHCHECK_PYTHON
#define GRAPHCHECK_PYTHON ""
#endif

namespace graphcheck::safetensors {
namespace {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct PythonRun {
  int exit_code = -1;  // -1 when the process did not exit normally
  std::string output;  // stdout and stderr together
};

// Runs GRAPHCHECK_PYTHON on script (given as text) with args; all paths under dir.
PythonRun run_python(const fs::path& dir, const std::string& script,
                     const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string stem = "script" + std::to_string(counter++);
  const fs::path script_path = dir / (stem + ".py");
  const fs::path log_path = dir / (stem + ".log");
  std::ofstream(script_path) << script;
  std::string command = shell_quote(GRAPHCHECK_PYTHON) + " " + shell_quote(script_path.string());
  for (const std::string& arg : args) command += " " + shell_quote(arg);
  command += " > " + shell_quote(log_path.string()) + " 2>&1";
  const int status = std::system(command.c_str());
  PythonRun run;
  run.output = read_all(log_path);
  if (status != -1 && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

// Why the tests must be skipped, or empty when Python with safetensors and numpy is usable.
const std::string& skip_reason() {
  static const std::string reason = [] {
    const std::string python = GRAPHCHECK_PYTHON;
    if (python.empty()) {
      return std::string(
          "GRAPHCHECK_PYTHON is empty: configure with a Python that has safetensors and numpy "
          "(e.g. ~/.cache/graphcheck/venv/bin/python) to run the interop tests");
    }
    const std::string command =
        shell_quote(python) + " -c 'import safetensors, numpy' > /dev/null 2>&1";
    const int status = std::system(command.c_str());
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return "'" + python + " -c \"import safetensors, numpy\"' failed: install safetensors and " +
             "numpy into that interpreter to run the interop tests";
    }
    return std::string();
  }();
  return reason;
}

class SafetensorsInterop : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!skip_reason().empty()) GTEST_SKIP() << skip_reason();
    std::string pattern = (fs::temp_directory_path() / "graphcheck_st_interop_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << "mkdtemp failed for " << pattern;
    m_dir = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    if (!m_dir.empty()) fs::remove_all(m_dir, ec);
  }

  fs::path m_dir;
};

// Python literal for a double that reads back exactly.
std::string py_float(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

template <typename T>
std::string py_list(const std::vector<T>& values) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i != 0) out << ", ";
    if constexpr (std::is_floating_point_v<T>) {
      out << py_float(static_cast<double>(values[i]));
    } else {
      out << +values[i];  // promotes int8/uint8 so they print as numbers
    }
  }
  out << "]";
  return out.str();
}

template <typename T>
TensorView view(const std::string& name, Dtype dtype, std::vector<std::int64_t> shape,
                const std::vector<T>& values) {
  return {name, dtype, std::move(shape), values.data(), values.size() * sizeof(T)};
}

template <typename T>
std::vector<T> values_of(const File& file, const std::string& name) {
  const TensorInfo* info = file.find(name);
  if (info == nullptr) {
    ADD_FAILURE() << "tensor '" << name << "' missing from " << file.path();
    return {};
  }
  if (info->nbytes() % sizeof(T) != 0) {
    ADD_FAILURE() << "tensor '" << name << "' has " << info->nbytes()
                  << " bytes, not a multiple of " << sizeof(T);
    return {};
  }
  std::vector<T> out(info->nbytes() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), file.data(*info), info->nbytes());
  return out;
}

// graphcheck writes; safetensors.safe_open (numpy) and safetensors.deserialize read and compare.
TEST_F(SafetensorsInterop, GraphcheckWritesPythonReads) {
  const std::vector<double> f64 = {-1.5, 0.0, 3.25, 1e300, -2.5e-300, 3.141592653589793};
  const std::vector<float> f32 = {-1.5f, 0.0f, 3.25f, 1e30f, -2.5e-30f, 0.1f};
  // F16 and BF16 bits are written by hand; the values are exact in both formats.
  const std::vector<std::uint16_t> f16_bits = {0xc200, 0xb800, 0x0000, 0x3c00, 0x7bff, 0x0400};
  const std::vector<double> f16_values = {-3.0, -0.5, 0.0, 1.0, 65504.0, 6.103515625e-05};
  const std::vector<std::uint16_t> bf16_bits = {0xc040, 0xbf00, 0x0000, 0x3f80, 0x4049, 0x7f7f};
  const std::vector<double> bf16_values = {-3.0, -0.5, 0.0, 1.0, 3.140625, 3.3895313892515355e+38};
  const std::vector<std::int64_t> i64 = {
      std::numeric_limits<std::int64_t>::min(), -1,          0, 1,
      std::numeric_limits<std::int64_t>::max(), 123456789012};
  const std::vector<std::int32_t> i32 = {std::numeric_limits<std::int32_t>::min(), -7, 0, 7,
                                         std::numeric_limits<std::int32_t>::max(), 42};
  const std::vector<std::int16_t> i16 = {-32768, -300, 0, 300, 32767, 5};
  const std::vector<std::int8_t> i8 = {-128, -3, 0, 3, 127, 9};
  const std::vector<std::uint8_t> u8 = {0, 1, 127, 128, 254, 255};
  const std::vector<std::uint8_t> boolean = {1, 0, 1, 1, 0, 0};
  const double scalar = 42.5;
  const std::map<std::string, std::string> metadata = {
      {"format", "np"}, {"graphcheck", "interop"}, {"unicode", "h\xc3\xa9llo"}};

  const std::string path = (m_dir / "from_graphcheck.safetensors").string();
  write(path,
        {view("f64", Dtype::F64, {6}, f64),
         view("f32", Dtype::F32, {2, 3}, f32),
         view("f16", Dtype::F16, {6}, f16_bits),
         view("bf16", Dtype::BF16, {3, 2}, bf16_bits),
         view("i64", Dtype::I64, {6}, i64),
         view("i32", Dtype::I32, {6}, i32),
         view("i16", Dtype::I16, {6}, i16),
         view("i8", Dtype::I8, {6}, i8),
         view("u8", Dtype::U8, {6}, u8),
         view("bool", Dtype::BOOL, {6}, boolean),
         {"scalar", Dtype::F64, {}, &scalar, sizeof scalar},
         {"empty", Dtype::I32, {0, 4}, nullptr, 0}},
        metadata);

  std::string script = R"PY(import sys
import numpy as np
from safetensors import safe_open, deserialize

path = sys.argv[1]
EXPECTED = {
)PY";
  // name: (numpy dtype, shape, values)
  const auto add = [&](const std::string& name, const std::string& dtype, const std::string& shape,
                       const std::string& values) {
    script += "    \"" + name + "\": (\"" + dtype + "\", " + shape + ", " + values + "),\n";
  };
  add("f64", "float64", "[6]", py_list(f64));
  add("f32", "float32", "[2, 3]", py_list(f32));
  add("f16", "float16", "[6]", py_list(f16_values));
  add("i64", "int64", "[6]", py_list(i64));
  add("i32", "int32", "[6]", py_list(i32));
  add("i16", "int16", "[6]", py_list(i16));
  add("i8", "int8", "[6]", py_list(i8));
  add("u8", "uint8", "[6]", py_list(u8));
  add("bool", "bool", "[6]", "[True, False, True, True, False, False]");
  add("scalar", "float64", "[]", py_float(scalar));
  add("empty", "int32", "[0, 4]", "[]");
  script += "}\nF16_BITS = " + py_list(f16_bits) + "\nBF16_BITS = " + py_list(bf16_bits) +
            "\nBF16_VALUES = " + py_list(bf16_values) +
            "\nMETADATA = {\"format\": \"np\", \"graphcheck\": \"interop\", "
            "\"unicode\": \"h\\u00e9llo\"}\n";
  script += R"PY(
failures = []

def check(ok, message):
    if not ok:
        failures.append(message)

with safe_open(path, framework="numpy") as f:
    check(f.metadata() == METADATA, f"metadata: {f.metadata()!r}")
    check(sorted(f.keys()) == sorted(list(EXPECTED) + ["bf16"]), f"keys: {sorted(f.keys())}")
    for name, (dtype, shape, values) in EXPECTED.items():
        t = f.get_tensor(name)
        want = np.array(values, dtype=dtype).reshape(shape)
        check(t.dtype == np.dtype(dtype), f"{name}: dtype {t.dtype}, want {dtype}")
        check(list(t.shape) == shape, f"{name}: shape {list(t.shape)}, want {shape}")
        check(t.shape == want.shape and np.array_equal(t, want),
              f"{name}: values {t.tolist()}, want {want.tolist()}")
    f16 = f.get_tensor("f16")
    check(f16.view(np.uint16).tolist() == F16_BITS, f"f16 bits {f16.view(np.uint16).tolist()}")

# numpy has no bfloat16: read the raw bytes through the reference deserializer, which also
# validates the whole file (offsets cover the data section exactly).
with open(path, "rb") as fh:
    raw = dict(deserialize(fh.read()))
bf = raw["bf16"]
check(bf["dtype"] == "BF16", f"bf16 dtype {bf['dtype']}")
check(list(bf["shape"]) == [3, 2], f"bf16 shape {bf['shape']}")
bits = np.frombuffer(bytes(bf["data"]), dtype="<u2")
check(bits.tolist() == BF16_BITS, f"bf16 bits {bits.tolist()}")
floats = (bits.astype("<u4") << 16).view("<f4").astype(np.float64)
check(floats.tolist() == BF16_VALUES, f"bf16 values {floats.tolist()}")
check(raw["bool"]["dtype"] == "BOOL" and raw["u8"]["dtype"] == "U8", "BOOL/U8 dtype names")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("ok")
)PY";
  const PythonRun run = run_python(m_dir, script, {path});
  EXPECT_EQ(run.exit_code, 0) << "Python rejected graphcheck's file:\n" << run.output;
}

// Every Dtype graphcheck knows is accepted by the reference under the same name, with the same
// bytes.
TEST_F(SafetensorsInterop, EveryDtypeAcceptedByReference) {
  std::vector<std::vector<std::uint8_t>> buffers;
  buffers.reserve(all_dtypes().size());  // views point into these buffers
  std::vector<TensorView> views;
  std::string expected = "EXPECTED = {\n";
  for (const Dtype dtype : all_dtypes()) {
    const std::size_t n = 5 * dtype_size(dtype);
    std::vector<std::uint8_t> bytes(n);
    for (std::size_t i = 0; i < n; ++i) {
      bytes[i] = static_cast<std::uint8_t>((i * 29 + buffers.size() * 7 + 1) & 0xff);
    }
    const std::string name = "t_" + std::string(dtype_name(dtype));
    expected += "    \"" + name + "\": (\"" + std::string(dtype_name(dtype)) + "\", " +
                py_list(bytes) + "),\n";
    buffers.push_back(std::move(bytes));
    views.push_back({name, dtype, {5}, buffers.back().data(), n});
  }
  expected += "}\n";
  const std::string path = (m_dir / "all_dtypes.safetensors").string();
  write(path, views);

  const std::string script = "import sys\nfrom safetensors import deserialize\n" + expected + R"PY(
with open(sys.argv[1], "rb") as fh:
    raw = dict(deserialize(fh.read()))
failures = []
if sorted(raw) != sorted(EXPECTED):
    failures.append(f"names {sorted(raw)}")
for name, (dtype, data) in EXPECTED.items():
    t = raw.get(name)
    if t is None:
        continue
    if t["dtype"] != dtype or list(t["shape"]) != [5] or list(bytes(t["data"])) != data:
        failures.append(f"{name}: got {t['dtype']} {t['shape']} {list(bytes(t['data']))}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print("ok")
)PY";
  const PythonRun run = run_python(m_dir, script, {path});
  EXPECT_EQ(run.exit_code, 0) << "Python disagreed:\n" << run.output;
}

// Python writes with safetensors.numpy.save_file; graphcheck opens and checks the values.
TEST_F(SafetensorsInterop, PythonWritesGraphcheckReads) {
  const std::string path = (m_dir / "from_python.safetensors").string();
  const std::string script = R"PY(import sys
import numpy as np
from safetensors.numpy import save_file

tensors = {
    "f64": np.array([-3.5, 0.25, 1e-300, 2.0**60, -0.0, 7.0], dtype=np.float64).reshape(2, 3),
    "f32": np.array([-3.5, 0.25, 1e-30, 2.0**60, 0.1, 7.0], dtype=np.float32),
    "f16": np.array([-3.5, 0.25, 65504, 2.0**-14, 2.0**-24, 7.0], dtype=np.float16),
    "i64": np.array([-2**63, -1, 0, 1, 2**63 - 1, 5], dtype=np.int64),
    "i32": np.array([-2**31, -1, 0, 1, 2**31 - 1, 5], dtype=np.int32),
    "i16": np.array([-2**15, -1, 0, 1, 2**15 - 1, 5], dtype=np.int16),
    "i8": np.array([-128, -1, 0, 1, 127, 5], dtype=np.int8),
    "u64": np.array([0, 1, 2**64 - 1, 2**63, 5, 6], dtype=np.uint64),
    "u32": np.array([0, 1, 2**32 - 1, 2**31, 5, 6], dtype=np.uint32),
    "u16": np.array([0, 1, 2**16 - 1, 2**15, 5, 6], dtype=np.uint16),
    "u8": np.array([0, 1, 255, 128, 5, 6], dtype=np.uint8),
    "bool": np.array([True, False, False, True, True, False]),
    "scalar": np.array(1.25, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.int16),
}
save_file(tensors, sys.argv[1], metadata={"source": "python", "k": "v"})
print("ok")
)PY";
  const PythonRun run = run_python(m_dir, script, {path});
  ASSERT_EQ(run.exit_code, 0) << "Python could not write the file:\n" << run.output;

  const File file = File::open(path);
  EXPECT_EQ(file.metadata(),
            (std::map<std::string, std::string>{{"source", "python"}, {"k", "v"}}));
  ASSERT_EQ(file.tensors().size(), 14u);
  const auto expect_info = [&](const std::string& name, Dtype dtype,
                               const std::vector<std::int64_t>& shape) {
    const TensorInfo* info = file.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, dtype) << name;
    EXPECT_EQ(info->shape, shape) << name;
  };
  expect_info("f64", Dtype::F64, {2, 3});
  expect_info("f32", Dtype::F32, {6});
  expect_info("f16", Dtype::F16, {6});
  expect_info("i64", Dtype::I64, {6});
  expect_info("i32", Dtype::I32, {6});
  expect_info("i16", Dtype::I16, {6});
  expect_info("i8", Dtype::I8, {6});
  expect_info("u64", Dtype::U64, {6});
  expect_info("u32", Dtype::U32, {6});
  expect_info("u16", Dtype::U16, {6});
  expect_info("u8", Dtype::U8, {6});
  expect_info("bool", Dtype::BOOL, {6});
  expect_info("scalar", Dtype::F32, {});
  expect_info("empty", Dtype::I16, {0, 3});

  const std::vector<double> f64 = values_of<double>(file, "f64");
  ASSERT_EQ(f64.size(), 6u);
  EXPECT_EQ(f64, (std::vector<double>{-3.5, 0.25, 1e-300, std::ldexp(1.0, 60), -0.0, 7.0}));
  EXPECT_TRUE(std::signbit(f64[4])) << "-0.0 lost its sign";
  EXPECT_EQ(values_of<float>(file, "f32"),
            (std::vector<float>{-3.5f, 0.25f, 1e-30f, std::ldexp(1.0f, 60), 0.1f, 7.0f}));
  // binary16 bits of -3.5, 0.25, 65504, 2^-14 (smallest normal), 2^-24 (smallest subnormal), 7.
  EXPECT_EQ(values_of<std::uint16_t>(file, "f16"),
            (std::vector<std::uint16_t>{0xc300, 0x3400, 0x7bff, 0x0400, 0x0001, 0x4700}));
  EXPECT_EQ(values_of<std::int64_t>(file, "i64"),
            (std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), -1, 0, 1,
                                       std::numeric_limits<std::int64_t>::max(), 5}));
  EXPECT_EQ(values_of<std::int32_t>(file, "i32"),
            (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), -1, 0, 1,
                                       std::numeric_limits<std::int32_t>::max(), 5}));
  EXPECT_EQ(values_of<std::int16_t>(file, "i16"),
            (std::vector<std::int16_t>{-32768, -1, 0, 1, 32767, 5}));
  EXPECT_EQ(values_of<std::int8_t>(file, "i8"), (std::vector<std::int8_t>{-128, -1, 0, 1, 127, 5}));
  EXPECT_EQ(values_of<std::uint64_t>(file, "u64"),
            (std::vector<std::uint64_t>{0, 1, std::numeric_limits<std::uint64_t>::max(),
                                        std::uint64_t{1} << 63, 5, 6}));
  EXPECT_EQ(values_of<std::uint32_t>(file, "u32"),
            (std::vector<std::uint32_t>{0, 1, 4294967295u, 2147483648u, 5, 6}));
  EXPECT_EQ(values_of<std::uint16_t>(file, "u16"),
            (std::vector<std::uint16_t>{0, 1, 65535, 32768, 5, 6}));
  EXPECT_EQ(values_of<std::uint8_t>(file, "u8"), (std::vector<std::uint8_t>{0, 1, 255, 128, 5, 6}));
  EXPECT_EQ(values_of<std::uint8_t>(file, "bool"), (std::vector<std::uint8_t>{1, 0, 0, 1, 1, 0}));
  EXPECT_EQ(values_of<float>(file, "scalar"), std::vector<float>{1.25f});
  ASSERT_NE(file.find("empty"), nullptr);
  EXPECT_EQ(file.find("empty")->nbytes(), 0u);
}

// Python writes the dtypes numpy lacks (BF16, the FP8 family) through safetensors.serialize_file
// with raw bytes; graphcheck maps every dtype name and returns the same bytes.
TEST_F(SafetensorsInterop, PythonWritesRawDtypesGraphcheckReads) {
  const std::string path = (m_dir / "raw_dtypes.safetensors").string();
  const std::string script = R"PY(import sys
import numpy as np
from safetensors import TensorSpec, serialize_file

payloads = {
    "bf16": ("bfloat16", 3, np.array([0xc040, 0x3f80, 0x7f7f], dtype="<u2")),
    "e4m3": ("float8_e4m3fn", 4, np.array([0x00, 0x38, 0xb8, 0x7e], dtype=np.uint8)),
    "e5m2": ("float8_e5m2", 4, np.array([0x00, 0x3c, 0xbc, 0x7b], dtype=np.uint8)),
    "e8m0": ("float8_e8m0fnu", 4, np.array([0x7f, 0x80, 0x00, 0xfe], dtype=np.uint8)),
}
specs = {
    name: TensorSpec(dtype=dtype, shape=[n], data_ptr=arr.ctypes.data, data_len=arr.nbytes)
    for name, (dtype, n, arr) in payloads.items()
}
serialize_file(specs, sys.argv[1], metadata={"raw": "yes"})
print("ok")
)PY";
  const PythonRun run = run_python(m_dir, script, {path});
  ASSERT_EQ(run.exit_code, 0) << "Python could not write the file:\n" << run.output;

  const File file = File::open(path);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"raw", "yes"}}));
  ASSERT_EQ(file.tensors().size(), 4u);
  ASSERT_NE(file.find("bf16"), nullptr);
  EXPECT_EQ(file.find("bf16")->dtype, Dtype::BF16);
  EXPECT_EQ(values_of<std::uint16_t>(file, "bf16"),
            (std::vector<std::uint16_t>{0xc040, 0x3f80, 0x7f7f}));
  const std::map<std::string, std::pair<Dtype, std::vector<std::uint8_t>>> fp8 = {
      {"e4m3", {Dtype::F8_E4M3, {0x00, 0x38, 0xb8, 0x7e}}},
      {"e5m2", {Dtype::F8_E5M2, {0x00, 0x3c, 0xbc, 0x7b}}},
      {"e8m0", {Dtype::E8M0, {0x7f, 0x80, 0x00, 0xfe}}},
  };
  for (const auto& [name, expected] : fp8) {
    const TensorInfo* info = file.find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, expected.first) << name;
    EXPECT_EQ(info->shape, std::vector<std::int64_t>{4}) << name;
    EXPECT_EQ(values_of<std::uint8_t>(file, name), expected.second) << name;
  }
}

}  // namespace
}  // namespace graphcheck::safetensors
