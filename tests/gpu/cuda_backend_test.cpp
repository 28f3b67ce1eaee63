// The cuda backend, the pointer audit and the harness's CUDA kernels on a real device: every
// scenario captured, refitted and replayed on the cuda backend; the audit's read set of each
// graph against the emulated backend's (graph-pool intermediates are not reads in either); every
// declared mutation caught on cuda by the probes its scenario declares; the quantized ops' CUDA
// implementations against their CPU references; poison and fingerprint kernels against the CPU
// code. Each test skips, with the reason, where no CUDA device is usable.

#include "backends/cuda_backend.h"

#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "backends/cuda_tensor_ops.h"
#include "fingerprint.h"
#include "graphcheck/engine/driver.h"
#include "graphcheck/engine/session.h"
#include "graphcheck/probe.h"
#include "graphcheck/engine/scenario.h"
#include "passes/passes.h"
#include "perturb_bits.h"
#include "poison.h"
#include "quant_ops.h"

namespace graphcheck {
namespace {

namespace fs = std::filesystem;

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaAvailability a = cuda_availability();
    if (!a.usable) GTEST_SKIP() << "no CUDA device, GPU test skipped: " << a.reason;
  }
};

// ---- the quantized ops: CUDA implementations against the CPU references ----------------------

using QuantOpsOnCuda = CudaDevice;

TEST_F(QuantOpsOnCuda, Fp8BlockQuantizeMatchesTheCpuReference) {
  torch::manual_seed(1);
  const torch::Tensor w = torch::randn({80, 96}) * 3;
  auto [q_cpu, s_cpu] = kernels::fp8_block_quantize(w, 32);
  auto [q_gpu, s_gpu] = kernels::fp8_block_quantize(w.cuda(), 32);
  EXPECT_TRUE(torch::allclose(s_gpu.cpu(), s_cpu, 1e-6, 0));
  const torch::Tensor d_cpu = kernels::fp8_block_dequantize(q_cpu, s_cpu, 32);
  const torch::Tensor d_gpu = kernels::fp8_block_dequantize(q_gpu, s_gpu, 32).cpu();
  // Both round to nearest even: the same codes, at most one e4m3 step apart where they tie.
  EXPECT_TRUE(torch::allclose(d_gpu, d_cpu, 0.0625, 1e-6)) << (d_gpu - d_cpu).abs().max();
  // Dequantizing the same codes is exact.
  EXPECT_TRUE(
      torch::equal(kernels::fp8_block_dequantize(q_cpu.cuda(), s_cpu.cuda(), 32).cpu(), d_cpu));
}

TEST_F(QuantOpsOnCuda, Fp8BlockLinearMatchesTheCpuReference) {
  torch::manual_seed(2);
  const torch::Tensor w = torch::randn({64, 96});
  const torch::Tensor x = torch::randn({4, 96});
  auto [q, s] = kernels::fp8_block_quantize(w, 32);
  const torch::Tensor cpu = kernels::fp8_block_linear(x, q, s, 32);
  const torch::Tensor gpu = kernels::fp8_block_linear(x.cuda(), q.cuda(), s.cuda(), 32).cpu();
  EXPECT_TRUE(torch::allclose(gpu, cpu, 1e-4, 1e-4)) << (gpu - cpu).abs().max();
}

TEST_F(QuantOpsOnCuda, Mxfp4QuantizeAndMoeMatchTheCpuReference) {
  torch::manual_seed(3);
  const torch::Tensor w13 = torch::randn({2, 64, 32}) * 0.5;  // [E, 2I, H]
  const torch::Tensor w2 = torch::randn({2, 32, 32}) * 0.5;   // [E, H, I]
  auto [p13, s13] = kernels::mxfp4_quantize(w13);
  auto [p2, s2] = kernels::mxfp4_quantize(w2);
  auto [gp13, gs13] = kernels::mxfp4_quantize(w13.cuda());
  EXPECT_TRUE(torch::equal(gs13.cpu(), s13)) << "UE8M0 scales differ";
  EXPECT_TRUE(torch::equal(gp13.cpu(), p13)) << "E2M1 codes differ";
  EXPECT_TRUE(torch::equal(kernels::mxfp4_dequantize(p13.cuda(), s13.cuda()).cpu(),
                           kernels::mxfp4_dequantize(p13, s13)));
  const torch::Tensor x = torch::randn({3, 32});
  const torch::Tensor gates = torch::softmax(torch::randn({3, 2}), 1);
  const torch::Tensor cpu = kernels::mxfp4_moe(x, p13, s13, p2, s2, gates);
  const torch::Tensor gpu =
      kernels::mxfp4_moe(x.cuda(), p13.cuda(), s13.cuda(), p2.cuda(), s2.cuda(), gates.cuda())
          .cpu();
  EXPECT_TRUE(torch::allclose(gpu, cpu, 1e-4, 1e-4)) << (gpu - cpu).abs().max();
}

// ---- the harness's kernels: poison and fingerprint ------------------------------------------

using HarnessKernelsOnCuda = CudaDevice;

TEST_F(HarnessKernelsOnCuda, PoisonFillAndScanAgreeWithTheCpuCode) {
  for (auto dtype :
       {torch::kFloat32, torch::kBFloat16, torch::kFloat16, torch::kUInt8, torch::kFloat64}) {
    torch::Tensor cpu = torch::zeros({1000}, dtype);
    torch::Tensor gpu = cpu.cuda();
    fill_poison(gpu);
    fill_poison(cpu);
    EXPECT_TRUE(torch::equal(gpu.cpu().view(torch::kUInt8), cpu.view(torch::kUInt8))) << dtype;
    gpu.narrow(0, 0, 10).zero_();  // a partial load: 990 elements survive, the first at 10
    cpu.narrow(0, 0, 10).zero_();
    const torch::Tensor expected = torch::ones({1000}, dtype);
    const Survivors g = count_survivors(gpu, expected.cuda());
    const Survivors c = count_survivors(cpu, expected);
    EXPECT_EQ(g.count, c.count) << dtype;
    EXPECT_EQ(g.first, c.first) << dtype;
    EXPECT_EQ(g.count, 990);
    EXPECT_EQ(g.first, 10);
    const Survivors g0 = count_survivors(gpu, torch::Tensor());
    const Survivors c0 = count_survivors(cpu, torch::Tensor());
    EXPECT_EQ(g0.count, c0.count) << dtype;  // sentinel dtypes: only when every element kept it
  }
}

TEST_F(HarnessKernelsOnCuda, FingerprintDependsOnContentNotLayout) {
  const torch::Tensor a = torch::arange(4096, torch::kFloat32).reshape({64, 64}).cuda();
  const torch::Tensor b = a.t().contiguous().t();
  EXPECT_EQ(fingerprint(a), fingerprint(b));
  torch::Tensor c = a.clone();
  c[5][7] = -1;
  EXPECT_NE(fingerprint(a), fingerprint(c));
  EXPECT_NE(fingerprint(a), fingerprint(a.narrow(0, 0, 63)));
}

// Note [Device scans in pieces]: a scan against an expected value on the host, or in another
// layout, copies it to the device a piece at a time and counts what the CPU code counts, the first
// survivor included, whatever the pieces split.
TEST_F(HarnessKernelsOnCuda, ScansAgainstAnExpectedValueElsewhereInPieces) {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kUInt8}) {
    torch::Tensor cpu = torch::zeros({40, 30}, dtype);
    fill_poison(cpu);
    cpu.narrow(0, 0, 3).zero_();  // the first survivor at 90
    const torch::Tensor gpu = cpu.cuda();
    torch::Tensor record = torch::ones({30, 40}, dtype);  // a transposed record, on the host
    fill_poison(record.narrow(0, 5, 1));                  // excused where it holds the pattern too
    const torch::Tensor expected = record.t();
    const Survivors want = count_survivors(cpu, expected);
    ASSERT_GT(want.count, 0) << dtype;
    ASSERT_LT(want.count, 40 * 30 - 90) << dtype;
    EXPECT_EQ(want.first, 90) << dtype;
    for (const std::int64_t budget : std::vector<std::int64_t>{1, 50, 1000, 64 << 20}) {
      const cuda_ops::ScanResult got =
          cuda_ops::detail::scan_poison_in_pieces(gpu, expected, poison_byte(dtype), budget);
      EXPECT_EQ(got.count, want.count) << dtype << ", pieces of " << budget;
      EXPECT_EQ(got.first, want.first) << dtype << ", pieces of " << budget;
    }
    const Survivors whole = count_survivors(gpu, expected);
    EXPECT_EQ(whole.count, want.count) << dtype;
    EXPECT_EQ(whole.first, want.first) << dtype;
    // The same record on the device, transposed: copied on the device, a piece at a time.
    const Survivors on_device = count_survivors(gpu, record.cuda().t());
    EXPECT_EQ(on_device.count, want.count) << dtype;
    EXPECT_EQ(on_device.first, want.first) << dtype;
    // A clean region has no survivor, whatever the record holds (no piece copied at all).
    const cuda_ops::ScanResult clean =
        cuda_ops::detail::scan_poison_in_pieces(torch::zeros({40, 30}, dtype).cuda(), expected, poison_byte(dtype), 50);
    EXPECT_EQ(clean.count, 0) << dtype;
    EXPECT_EQ(clean.first, -1) << dtype;
  }
}

// Note [Device fingerprints in pieces]: a view that is not contiguous, fingerprinted a piece at a
// time, hashes as its contiguous copy does, whatever the pieces split (lanes, rows, elements).
TEST_F(HarnessKernelsOnCuda, FingerprintInPiecesIsTheContiguousCopys) {
  torch::manual_seed(3);
  const torch::Tensor f = torch::randn({6, 10, 14}).cuda();
  const torch::Tensor h = torch::randn({5, 3, 7}).to(torch::kFloat16).cuda();
  const torch::Tensor b = torch::randint(0, 255, {33, 17}, torch::kUInt8).cuda();
  const torch::Tensor c = torch::randn({7, 3}, torch::kComplexFloat).cuda();
  const std::vector<std::pair<torch::Tensor, const char*>> views = {
      {f.transpose(1, 2), "a stack of matrices seen transposed"},
      {f.permute({2, 0, 1}), "a permutation"},
      {f.narrow(2, 3, 5), "a column slice"},
      {h.transpose(0, 2), "float16 rows of odd bytes"},
      {b.t(), "bytes, transposed"},
      {f.select(1, 4).unsqueeze(1).expand({6, 3, 14}), "an expanded view"},
      {f.to(torch::kFloat64).transpose(0, 2), "float64, transposed"},
      {c.t().conj(), "a conjugate view, transposed (the copy resolves the bit)"},
      {c.narrow(1, 1, 2).conj(), "a column slice of a conjugate view (contiguous rows among its pieces)"},
      {f, "a contiguous tensor"},
  };
  for (const auto& [view, what] : views) {
    const std::uint64_t want = cuda_ops::fingerprint(view.contiguous());
    for (const std::int64_t budget : std::vector<std::int64_t>{1, 6, 40, 1000, 64 << 20}) {
      EXPECT_EQ(cuda_ops::detail::fingerprint_in_pieces(view, budget), want) << what << ", pieces of " << budget;
    }
    EXPECT_EQ(fingerprint(view), want) << what;
  }
  torch::Tensor changed = f.clone();
  changed[5][9][13] = 1e6;
  EXPECT_NE(cuda_ops::detail::fingerprint_in_pieces(changed.transpose(1, 2), 40),
            cuda_ops::fingerprint(f.transpose(1, 2).contiguous()));
}

// Note [A perturbation undone exactly], on a device: the coverage pass perturbs dense device
// tensors in place by libtorch's ops in pieces, with the host loops' patterns, and puts every bit
// back; a view with gaps is copied first, as on the host.
TEST_F(HarnessKernelsOnCuda, CoveragePerturbsDeviceTensorsInPlaceAndPutsEveryBitBack) {
  torch::manual_seed(4);
  std::vector<NamedTensor> live = {
      {"f32", torch::randn({300, 7}).cuda()},
      {"bf16_t", torch::randn({9, 40}).to(torch::kBFloat16).cuda().t()},
      {"f16", torch::randn({77}).to(torch::kFloat16).cuda()},
      {"f64", torch::randn({5}, torch::kFloat64).cuda()},
      {"bytes", torch::arange(0, 256, torch::kInt32).to(torch::kUInt8).cuda()},
      {"columns", torch::randn({6, 8}).cuda().slice(1, 0, 8, 2)},
  };
  std::vector<torch::Tensor> before;
  for (const auto& t : live) before.push_back(t.tensor.contiguous().cpu());
  const auto bits = [](const torch::Tensor& t) { return t.contiguous().cpu().view({-1}).view(torch::kUInt8); };
  CompareEvent compare;
  compare.replay_outputs = compare.eager_outputs = {torch::zeros({2})};
  CoverageEvent out;
  GraphView graph;
  passes::measure_coverage(graph, live, compare, [&] {
    for (std::size_t i = 0; i < live.size(); ++i) {
      const torch::Tensor now = live[i].tensor.contiguous().cpu();
      if (live[i].name != "columns") {
        // The host loops' patterns of the value before.
        torch::Tensor expected = before[i].clone();
        const auto format = live[i].name == "f32" ? perturb::Format::binary32
                            : live[i].name == "bf16_t" ? perturb::Format::bfloat16
                            : live[i].name == "f16" ? perturb::Format::binary16
                            : live[i].name == "f64" ? perturb::Format::binary64
                                                    : perturb::Format::byte;
        perturb::apply_forward(format, expected.data_ptr(), expected.numel());
        EXPECT_TRUE(torch::equal(bits(now), bits(expected))) << live[i].name;
      } else {
        EXPECT_FALSE(torch::equal(now, before[i])) << "the copied view was not perturbed";
      }
    }
    return std::make_pair(TensorList{torch::zeros({2})}, TensorList{torch::zeros({2})});
  }, out);
  EXPECT_EQ(out.replays, 1);
  for (std::size_t i = 0; i < live.size(); ++i) {
    EXPECT_TRUE(torch::equal(bits(live[i].tensor), bits(before[i]))) << live[i].name << " not put back bit for bit";
  }
}

// ---- every scenario on the cuda backend ----------------------------------------------------

// Why the scenario list could not be read, if it could not (ScenarioFiles.AreFound fails with it).
std::string& scenario_files_error() {
  static std::string error;
  return error;
}

std::vector<std::string> scenario_files() {
  try {
    return collect_scenario_files({GRAPHCHECK_SCENARIO_DIR});
  } catch (const std::exception& e) {
    scenario_files_error() = e.what();
    return {};
  }
}

// Not a GPU test: a scenario directory that cannot be read fails here, on every machine, instead
// of leaving ScenarioOnCuda with no instances.
TEST(ScenarioFiles, AreFound) {
  const std::vector<std::string> files = scenario_files();
  EXPECT_TRUE(scenario_files_error().empty()) << GRAPHCHECK_SCENARIO_DIR << ": " << scenario_files_error();
  EXPECT_FALSE(files.empty()) << "no scenario file under " << GRAPHCHECK_SCENARIO_DIR;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = fs::path(info.param).stem().string();
  std::replace_if(
      name.begin(), name.end(),
      [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
  return name;
}

// The names of every read of every graph the observe pass captured.
class ReadNames final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "test_read_names"; }
  void on_capture_end(RunContext&, const CaptureEvent& e) override {
    for (const ResolvedRead& r : e.graph->reads)
      names.insert(r.name.empty() ? "(undeclared)" : r.name);
  }
  std::set<std::string> names;
};

// Hook calls made in the capture phase ("hook@module" -> calls), and how many captures ended.
class CaptureHookCalls final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "test_capture_hook_calls"; }
  void on_hook(RunContext&, const HookEvent& e) override {
    if (e.phase == Phase::capture) ++calls[e.hook + "@" + e.module_path];
  }
  void on_capture_end(RunContext&, const CaptureEvent&) override { ++captures; }
  std::map<std::string, int> calls;
  int captures = 0;
};

class ScenarioOnCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const CudaAvailability a = cuda_availability();
    if (!a.usable) GTEST_SKIP() << "no CUDA device, GPU test skipped: " << a.reason;
    try {
      scenario = parse_scenario_file(GetParam(), default_catalog());
    } catch (const ScenarioNeedsFront& e) {
      GTEST_SKIP() << "a scenario of another front (python -m graphcheck runs it): " << e.what();
    } catch (const ScenarioError& e) {
      FAIL() << "the scenario file does not parse: " << e.what();
    }
  }
  RunOptions options(const std::string& backend, const std::string& tag) const {
    RunOptions o;
    o.backend = backend;
    o.work_dir = (fs::path(GRAPHCHECK_GPU_WORK_DIR) / tag).string();
    return o;
  }
  Scenario scenario;
};

std::string findings_of(const ScenarioRecord& r) {
  std::string out = r.reason;
  for (const Finding& f : r.findings) out += "\n  [" + f.probe + "] " + f.message;
  return out;
}

TEST_P(ScenarioOnCuda, CaptureRefitReplayPasses) {
  RunOptions o = options("cuda", "clean");
  const ScenarioRecord r = run_scenario(scenario, o);
  EXPECT_EQ(r.backend, "cuda");
  EXPECT_EQ(r.status, Status::passed) << findings_of(r);
}

TEST_P(ScenarioOnCuda, AuditReadSetEqualsTheEmulatedOne) {
  ReadNames on_cuda, emulated;
  RunOptions c = options("cuda", "reads_cuda");
  c.extra_probes = {&on_cuda};
  RunOptions e = options("emulated", "reads_emulated");
  e.extra_probes = {&emulated};
  const ScenarioRecord rc = run_scenario(scenario, c);
  const ScenarioRecord re = run_scenario(scenario, e);
  // The read sets of runs that ended early are partial: both runs must have got through.
  ASSERT_EQ(rc.status, Status::passed) << "cuda: " << findings_of(rc);
  ASSERT_EQ(re.status, Status::passed) << "emulated: " << findings_of(re);
  EXPECT_FALSE(on_cuda.names.empty()) << "the audit found no baked weight";
  EXPECT_EQ(on_cuda.names, emulated.names);
}

// The capture window counts one forward on either backend: the cuda backend's warm-up forwards
// and the audit's confirming capture make no hook calls there (Note [Uncounted forwards] in
// backends/cuda_parts.h). A hook in forward (a mutation's lazy finalize) shows it; runs whose captures
// did not all end alike (a forward the capture refuses) are not compared.
TEST_P(ScenarioOnCuda, CapturePhaseHookCallsEqualTheEmulatedOnes) {
  std::vector<std::string> runs = {""};
  for (const auto& [mutation, probes] : scenario.mutations) runs.push_back(mutation);
  for (const std::string& mutation : runs) {
    CaptureHookCalls on_cuda, emulated;
    RunOptions c = options("cuda", "capture_hooks_cuda_" + mutation);
    RunOptions e = options("emulated", "capture_hooks_emulated_" + mutation);
    if (!mutation.empty()) c.mutations = e.mutations = {mutation};
    c.extra_probes = {&on_cuda};
    e.extra_probes = {&emulated};
    (void)run_scenario(scenario, c);
    (void)run_scenario(scenario, e);
    if (on_cuda.captures != emulated.captures) continue;
    EXPECT_EQ(on_cuda.calls, emulated.calls)
        << scenario.name << (mutation.empty() ? "" : " with " + mutation);
  }
}

TEST_P(ScenarioOnCuda, EveryMutationIsCaught) {
  if (scenario.mutations.empty()) GTEST_SKIP() << scenario.name << " declares no mutation";
  for (const auto& [mutation, probes] : scenario.mutations) {
    RunOptions o = options("cuda", "mutation_" + mutation);
    o.mutations = {mutation};
    const ScenarioRecord r = run_scenario(scenario, o);
    const MutationVerdict v = session::judge_mutation(r, mutation);
    EXPECT_TRUE(v.missed.empty()) << mutation << " on " << scenario.name << " missed by "
                                  << ::testing::PrintToString(v.missed) << findings_of(r);
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ScenarioOnCuda, ::testing::ValuesIn(scenario_files()),
                         param_name);

}  // namespace
}  // namespace graphcheck
