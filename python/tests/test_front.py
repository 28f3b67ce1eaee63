"""The Python front end to end: graphcheck.check() on small vLLM-style models, planted bugs,
Python exceptions, idiomatic Python that must not be flagged, and the CLI."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphcheck

REBIND = graphcheck.mutation("test.front.rebind_derived",
                             "PWAL rebinds the derived scale to a new tensor instead of copy_()")


class Derived(torch.nn.Module):
    """A projection with a derived per-column scale that PWAL refreshes in place."""

    def __init__(self, hidden: int = 16, pwal_raises: bool = False, shape_branch: bool = False,
                 item_branch: bool = False, rand_branch: bool = False, mask_assign: bool = False,
                 dropout: bool = False):
        super().__init__()
        self.proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.proj.weight.requires_grad_(False)
        self.register_buffer("inv_freq", torch.arange(hidden, dtype=torch.float32) / hidden, persistent=False)
        self.scale = torch.zeros(hidden)  # a plain tensor attribute: found, not "undeclared"
        self.cache = [torch.ones(hidden)]  # a tensor in a list
        self.hidden = hidden
        self.pwal_raises = pwal_raises
        self.shape_branch = shape_branch
        self.item_branch = item_branch
        self.rand_branch = rand_branch
        self.mask_assign = mask_assign
        self.dropout = dropout

    def load_weights(self, weights):
        return graphcheck.default_load_weights(self, weights)

    def process_weights_after_loading(self):
        graphcheck.hook(self, "finalize_scale")
        if self.pwal_raises:
            raise ValueError("boom in PWAL")
        new = self.proj.weight.abs().sum(0)
        if graphcheck.enabled(REBIND):
            self.scale = new
        else:
            self.scale.copy_(new)

    def forward(self, x):
        y = self.proj(x) * self.scale * 0.5 + self.inv_freq + self.cache[0]
        if self.shape_branch and x.shape[0] > 1:  # shape-derived: fine under a graph
            y = y * 2
        if self.item_branch and self.proj.weight.sum().item() > 0:  # a host sync of data
            y = y * 3
        if self.rand_branch and torch.rand(1).item() > 2:  # a host sync of a fresh tensor
            y = y * 5
        if self.mask_assign:  # nonzero on the data inside index_put_, whatever the value
            y = y.clone()
            y[y > 0] = x.shape[0]
        if self.dropout:
            y = torch.nn.functional.dropout(y, 0.25, training=True)  # left in training mode
        return y

    def make_inputs(self, batch_size, seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(batch_size, self.hidden, generator=g)

    def expected_hooks(self):
        return [graphcheck.ExpectedHook("(root)", "finalize_scale")]


def test_clean_model_passes():
    record = graphcheck.check(Derived)
    assert record.passed, record.explain()
    assert not [f for f in record.findings if "undeclared" in f["message"]], record.explain()


def test_rebind_is_caught_and_names_the_tensor():
    record = graphcheck.check(Derived, mutations=[REBIND])
    assert not record.passed
    address = [f for f in record.findings if f["probe"] == "address"]
    assert address, record.explain()
    assert any("scale" in f["subject"] for f in address), record.explain()


def test_python_exception_carries_its_traceback():
    record = graphcheck.check(Derived, scenario={"config": {"pwal_raises": True}})
    assert record.status == "failed", record.explain()
    messages = "\n".join(f["message"] for f in record.findings)
    assert "Traceback" in messages and "boom in PWAL" in messages and "test_front.py" in messages, messages


def test_shape_control_flow_is_not_a_host_sync():
    record = graphcheck.check(Derived, scenario={"config": {"shape_branch": True}})
    assert record.passed, record.explain()


class Forked(Derived):
    """Part of the forward forked (torch.jit.fork), which eager runs at once on the calling thread:
    its ops are recorded with the rest (under torch.jit's tracer, a prim::TracedFork node)."""

    def forward(self, x):
        future = torch.jit.fork(lambda t: t * 2 + self.inv_freq, x)
        return self.proj(x) * self.scale + torch.jit.wait(future)


def test_a_forked_forward_is_captured_and_replays():
    record = graphcheck.check(Forked)
    assert record.passed, record.explain()


@torch.jit.script
def _scaled(t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return t * s + 1.0


@torch.jit.script
def _gated(t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    if bool(s.sum() > 1e9):
        return t
    return t * s + 1.0


class ScriptedCall(Derived):
    """The forward calls a torch.jit.script function (Megatron's fused bias-GeLU style): the ops the
    TorchScript interpreter runs for it are recorded like the forward's own."""

    def __init__(self, gated: bool = False, **config):
        super().__init__(**config)
        self.fn = _gated if gated else _scaled

    def forward(self, x):
        return self.fn(self.proj(x), self.scale) + self.inv_freq


def test_a_scripted_function_in_the_forward_is_captured_and_replays():
    # Constant pooling once merged the function constant into None: an internal assert of
    # libtorch's interpreter, reported as the model's failure.
    assert graphcheck.check(ScriptedCall).passed
    record = graphcheck.check(ScriptedCall, mutations=[REBIND])
    address = [f for f in record.findings if f["probe"] == "address"]
    assert any("scale" in f["subject"] for f in address), record.explain()


def test_a_host_sync_inside_a_scripted_function_is_a_host_sync():
    record = graphcheck.check(ScriptedCall, scenario={"config": {"gated": True}})
    assert record.status == "failed", record.explain()
    assert any("host sync" in f["message"] for f in record.findings), record.explain()


class _EqualBranches(torch.autograd.Function):
    """Branches on a value read to the host through no op (a NumPy view) into ops that give the
    same values (2y - y is y)."""

    @staticmethod
    def forward(ctx, y):
        if float(y.abs().max().detach().numpy()) > 500:
            return y * 2 - y
        return y.clone()


class FunctionBranch(Derived):
    def forward(self, x):
        return _EqualBranches.apply(self.proj(x)) * self.scale + self.inv_freq


def test_a_branch_inside_an_autograd_function_is_frozen_at_capture():
    # Note [Recorded forwards]: the ops inside an autograd Function's apply are the forward's own
    # calls, recorded as a CUDA graph captures them; the branch its forward took on a value read
    # through NumPy is frozen in, and a recording on the largest inputs parts from the capture at
    # that op. (Under torch.jit's tracer the Function was one node that ran its Python live.)
    record = graphcheck.check(FunctionBranch)
    assert record.status == "failed", record.explain()
    frozen = [f for f in record.findings if f["probe"] == "replay_diff" and "frozen" in f["message"]]
    assert frozen and "aten::clone at capture, aten::mul now" in frozen[0]["message"], record.explain()
    assert "test_front.py:" in frozen[0]["message"], frozen[0]["message"]


def _stream_capturing() -> bool:
    """As transformers asks: torch without CUDA raises where it has no answer."""
    try:
        return torch.cuda.is_current_stream_capturing()
    except RuntimeError:
        return False


class CaptureAware(Derived):
    """Checks its input on the host only outside a capture, as transformers' and serving code do
    (`if not is_tracing(): ... .all()`)."""

    def forward(self, x):
        if not _stream_capturing():
            assert bool(torch.isfinite(x).all()), "non-finite input"
        return super().forward(x)


def test_model_code_that_asks_is_told_the_recording_is_a_capture():
    # Note [Capturing, as model code asks]: the host sync in eager only is no finding, and outside
    # graphcheck's recordings torch's own answer stands.
    record = graphcheck.check(CaptureAware)
    assert record.passed, record.explain()
    assert _stream_capturing() is False
    assert torch.cuda.is_current_stream_capturing.__doc__ == torch.cuda.graphs.is_current_stream_capturing.__doc__


class Autocast(Derived):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.proj(x).float() * self.scale


def test_autocast_switched_on_in_the_forward_is_the_emulated_backends_limit():
    # Note [Recorded forwards]: replay would not cast as the forward did (the autocast state is
    # thread-local): exit 2 naming the op and the backend to use, never a replay finding.
    record = graphcheck.check(Autocast)
    assert record.exit_code == 2 and record.status == "error", record.explain()
    reason = record.data["reason"]
    assert "torch.autocast" in reason and "aten::linear" in reason and "--backend cuda" in reason, reason
    assert not record.findings, record.explain()


@torch.jit.script
def _fused(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return a + b * c


class ScriptedFused(Derived):
    """A scripted function whose interpreter stack holds more than the op's own arguments
    (`a` waits on it while `b * c` runs): RecordFunction passes the whole stack."""

    def forward(self, x):
        return _fused(self.proj(x), self.scale, self.inv_freq)


def test_a_scripted_expression_whose_stack_is_wider_than_its_op_is_captured():
    record = graphcheck.check(ScriptedFused)
    assert record.passed, record.explain()


class HostBuilt(Derived):
    """Builds a tensor from host values in the forward and updates it in place (`.data` of an
    intermediate too): replay must start from the host's values, and see the in-place change."""

    def forward(self, x):
        acc = torch.tensor([0.5] * self.hidden)
        acc += x.sum(0)
        h = self.proj(x)
        h.data.clamp_(-1, 1)
        return h * self.scale + acc


def test_host_built_tensors_and_data_views_replay_as_eager_runs_them():
    record = graphcheck.check(HostBuilt)
    assert record.passed, record.explain()


class _Gate(torch.nn.Module):
    def forward(self, t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return t * s + 1.0


class ScriptedSubmodule(Derived):
    def __init__(self, **config):
        super().__init__(**config)
        self.gate = torch.jit.script(_Gate())

    def forward(self, x):
        return self.gate(self.proj(x), self.scale) + self.inv_freq


def test_a_scripted_submodule_is_captured_and_replays():
    # Note [Recorded forwards]: the ops a TorchScript module runs are recorded like any other. Under
    # torch.jit's tracer, which the emulated backend used before, such a call could not be captured.
    assert graphcheck.check(ScriptedSubmodule).passed
    record = graphcheck.check(ScriptedSubmodule, mutations=[REBIND])
    address = [f for f in record.findings if f["probe"] == "address"]
    assert any("scale" in f["subject"] for f in address), record.explain()


def test_item_on_data_is_a_host_sync_at_its_line():
    record = graphcheck.check(Derived, scenario={"config": {"item_branch": True}})
    assert not record.passed
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "self.proj.weight.sum().item() > 0" in text)
    assert any("host sync" in f["message"] and f"aten::item ({__file__}:{line}) at batch size" in f["message"]
               for f in record.findings), record.explain()


def test_a_nondeterministic_forward_names_the_op_and_line_where_runs_part():
    """Note [Where a forward stops repeating]: the ops before the dropout repeat, so it is named."""
    record = graphcheck.check(Derived, scenario={"config": {"dropout": True}})
    assert not record.passed
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "torch.nn.functional.dropout(y, 0.25" in text)
    named = [f for f in record.findings if "nondeterministic" in f["message"]]
    assert named, record.explain()
    assert f"first part at aten::dropout ({__file__}:{line}), op " in named[0]["message"], record.explain()


class KeywordInputs(torch.nn.Module):
    """Hugging Face style: make_inputs() returns the forward's keyword arguments, with a flag."""

    def __init__(self, hidden: int = 8, renamed: bool = False, scale_per_batch: bool = False):
        super().__init__()
        self.scale_per_batch = scale_per_batch
        self.proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.proj.weight.requires_grad_(False)
        self.hidden = hidden
        self.renamed = renamed
        self.calls = 0

    def load_weights(self, weights):
        return graphcheck.default_load_weights(self, weights)

    def process_weights_after_loading(self):
        pass

    def forward(self, hidden_states, attention_mask=None, output_scale=None):
        if attention_mask is None or output_scale is None:
            raise TypeError("forward() needs attention_mask and output_scale by keyword")
        return self.proj(hidden_states) * attention_mask * output_scale

    def make_inputs(self, batch_size: int, seed: int):
        self.calls += 1
        g = torch.Generator().manual_seed(seed)
        mask_name = "mask" if self.renamed and self.calls > 1 else "attention_mask"
        return {"hidden_states": torch.randn(batch_size, self.hidden, generator=g),
                mask_name: torch.ones(batch_size, 1),
                "output_scale": 1.0 / batch_size if self.scale_per_batch else 0.5}


def test_make_inputs_may_return_the_forwards_keyword_arguments():
    record = graphcheck.check(KeywordInputs)
    assert record.passed, record.explain()


def test_keyword_inputs_that_change_names_are_refused_naming_both():
    record = graphcheck.check(KeywordInputs, scenario={"config": {"renamed": True}})
    assert record.exit_code == 2, record.explain()
    text = record.explain()
    assert "['hidden_states', 'mask']" in text and "['hidden_states', 'attention_mask']" in text, text


def test_keyword_values_that_change_between_calls_are_refused():
    """A value passed unchanged to every forward that make_inputs() makes per batch size would be
    the last call's at every other batch size: refused, naming both."""
    record = graphcheck.check(KeywordInputs, scenario={"config": {"scale_per_batch": True},
                                                       "capture": {"batch_sizes": [1, 4]}})
    assert record.exit_code == 2, record.explain()
    text = record.explain()
    assert "'output_scale': 0.25" in text and "'output_scale': 1.0" in text, text


@pytest.mark.parametrize("config", [{"rand_branch": True}, {"mask_assign": True}], ids=["rand-item", "mask-assign"])
def test_host_syncs_near_shapes_are_still_host_syncs(config):
    record = graphcheck.check(Derived, scenario={"config": config})
    assert not record.passed
    assert any("host sync" in f["message"] for f in record.findings), record.explain()


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: the move of plain tensors (set_data) is CPU to CUDA; "
                           "meta tensors cannot stand in (set_data refuses another tensor type)")
def test_device_move_takes_the_plain_tensors_along():
    adapter = graphcheck.ModelAdapter(Derived(), "test")
    adapter.to("cuda")
    devices = {name: t.device.type for name, t, _ in adapter.registered_tensors() + adapter.extra_tensors()}
    assert set(devices.values()) == {"cuda"}, devices
    assert {"scale", "cache.0", "inv_freq", "proj.weight"} <= set(devices)


def test_a_truncated_checkpoint_is_a_user_error_for_python_models_too(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"proj.weight\": {\"dtype\": \"F32\"")
    record = graphcheck.check(Derived, scenario={"checkpoint": str(bad)})
    assert record.exit_code == 2, record.explain()


def test_model_files_import_their_siblings_and_resolve_from_the_caller(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "helpers.py").write_text("HIDDEN = 8\n")
    (tmp_path / "models" / "mine.py").write_text(
        "from helpers import HIDDEN\n"
        "from test_front import Derived\n"
        "def make():\n    return Derived(hidden=HIDDEN)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    record = graphcheck.check("models/mine.py:make")
    assert record.passed, record.explain()


def test_check_failed_message_shows_evidence():
    with pytest.raises(graphcheck.CheckFailed) as e:
        graphcheck.check(Derived, mutations=[REBIND], raise_on_failure=True)
    assert "[address]" in str(e.value) and "scale" in str(e.value)


class NoInputs(torch.nn.Module):
    def load_weights(self, weights):
        return set()

    def process_weights_after_loading(self):
        pass

    def forward(self, x):
        return x


def test_contract_error_is_a_user_error():
    record = graphcheck.check(NoInputs)
    assert record.exit_code == 2 and record.status == "error", record.explain()
    assert "make_inputs()" in record.data["reason"], record.data["reason"]


def test_unknown_config_key_names_the_factory():
    record = graphcheck.check(Derived, scenario={"config": {"hiden": 8}})
    assert record.exit_code == 2, record.explain()
    assert "hiden" in record.data["reason"], record.data["reason"]


def test_cli_runs_python_scenarios_isolated(repo, python_env, tmp_path):
    out = subprocess.run([sys.executable, "-m", "graphcheck", "run", str(repo / "python/tests/scenarios"),
                          "--report-dir", str(tmp_path)], env=python_env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "graphcheck.json").exists()


def test_cli_mutants_kills_the_declared_mutation(repo, python_env, tmp_path):
    out = subprocess.run([sys.executable, "-m", "graphcheck", "mutants", str(repo / "python/tests/scenarios"),
                          "--report-dir", str(tmp_path)], env=python_env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_cli_bad_python_model_spec_is_a_scenario_error(python_env, tmp_path):
    scenario = tmp_path / "bad.yaml"
    scenario.write_text("scenario: bad\nmodel: {python: \"no_such_module_xyz:make\"}\nload: checkpoint\n"
                        "capture: {batch_sizes: [1]}\nchecks: all\n")
    out = subprocess.run([sys.executable, "-m", "graphcheck", "run", str(scenario), "--report-dir", str(tmp_path)],
                         env=python_env, capture_output=True, text=True)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "bad.yaml:2:" in out.stderr + out.stdout and "no_such_module_xyz" in out.stderr + out.stdout


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: the cuda backend's Python path (at::cuda::CUDAGraph around "
                           "the Python forward) runs on a GPU machine (ci/gpu-check.sh)")
def test_cuda_backend_captures_the_python_forward():
    clean = graphcheck.check(Derived, backend="cuda")
    assert clean.passed, clean.explain()
    assert clean["backend"] == "cuda"
    mutated = graphcheck.check(Derived, backend="cuda", mutations=[REBIND])
    assert any(f["probe"] == "address" and "scale" in f["subject"] for f in mutated.findings), mutated.explain()


HANG_MODEL = '''
import time
import torch

class Hangs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4), requires_grad=False)
    def load_weights(self, weights):
        return graphcheck_default(self, weights)
    def process_weights_after_loading(self):
        time.sleep(120)
    def forward(self, x):
        return x * self.w
    def make_inputs(self, batch_size, seed):
        return torch.ones(batch_size, 4)

def graphcheck_default(model, weights):
    import graphcheck
    return graphcheck.default_load_weights(model, weights)
'''


def test_ctrl_c_stops_the_run_with_reports_intact(repo, python_env, tmp_path):
    import json
    import signal
    import time

    (tmp_path / "hang.py").write_text(HANG_MODEL)
    (tmp_path / "a_passes.yaml").write_text((repo / "python/tests/scenarios/derived.yaml").read_text()
                                            .replace("../test_front.py", str(repo / "python/tests/test_front.py")))
    (tmp_path / "b_hangs.yaml").write_text("scenario: py-hangs\nmodel: {python: \"hang.py:Hangs\"}\n"
                                           "load: checkpoint\ncapture: {batch_sizes: [1]}\nchecks: [replay_diff]\n")
    reports = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "graphcheck", "run", str(tmp_path), "--report-dir", str(reports)],
                            env=python_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    report = reports / "graphcheck.json"
    while time.time() < deadline:  # until the first scenario is on record
        if report.exists() and json.loads(report.read_text() or "{}").get("scenarios"):
            break
        time.sleep(0.5)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, out
    doc = json.loads(report.read_text())
    assert doc["complete"] is False and "SIGINT" in doc["incomplete_reason"], doc["incomplete_reason"]
    assert [s["name"] for s in doc["scenarios"] if s["status"] == "passed"] == ["py-test-derived"], out


USER_TRACE = '''
import torch

def f(x):
    return x * 2 + 1

seen = []
for step in range(2):
    if step == 1:
        import graphcheck  # installs nothing into torch's tracer
    graph = torch.jit.trace(f, torch.ones(2)).graph
    seen.append([(n.kind(), n.sourceRange()) for n in graph.nodes()])
assert seen[0] == seen[1], seen
assert all(r.startswith(__file__ + "(5): f\\n") for _, r in seen[1]), seen[1]
print("same sources", len(seen[1]))
'''


def test_a_users_own_trace_keeps_the_sources_torch_records(python_env, tmp_path):
    # Note [Source of recorded ops]: graphcheck records sources its own way, so a trace the user
    # makes in the same process gets, node for node, the source torch itself records (every frame,
    # constants too).
    script = tmp_path / "user_trace.py"
    script.write_text(USER_TRACE)
    out = subprocess.run([sys.executable, "-W", "ignore", str(script)], env=python_env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "same sources 5" in out.stdout, out.stdout


class _SglangStyle(torch.nn.Module):
    """load_weights() returns None, as SGLang's models do; `skip` names a tensor it takes from
    the stream and never writes."""

    def __init__(self, hidden=8, skip=""):
        super().__init__()
        self.up = torch.nn.Linear(hidden, hidden, bias=False).requires_grad_(False)
        self.down = torch.nn.Linear(hidden, hidden, bias=False).requires_grad_(False)
        self.hidden, self.skip = hidden, skip

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        for name, tensor in weights:
            if name != self.skip:
                params[name].copy_(tensor)

    def process_weights_after_loading(self):
        pass

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))

    def make_inputs(self, batch_size, seed):
        return torch.randn(batch_size, self.hidden, generator=torch.Generator().manual_seed(seed))


def test_a_load_weights_that_returns_none_reports_what_it_took_from_the_stream():
    record = graphcheck.check(_SglangStyle)
    assert record.passed, record.explain()
    skipped = graphcheck.check(_SglangStyle, scenario={"config": {"skip": "down.weight"}})
    assert not skipped.passed
    census = [f for f in skipped.findings if f["probe"] == "census"]
    assert census and census[0]["subject"] == "down.weight", skipped.explain()


class _CausalAttention(torch.nn.Module):
    """Self-attention whose causal flag comes from the sequence length, as serving code writes
    it; `convert` passes bool(...) instead."""

    def __init__(self, hidden=8, convert=False):
        super().__init__()
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False).requires_grad_(False)
        self.hidden, self.convert = hidden, convert

    def load_weights(self, weights):
        return graphcheck.default_load_weights(self, weights)

    def process_weights_after_loading(self):
        pass

    def forward(self, x):
        seq_len = x.shape[1]
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        causal = bool(seq_len > 1) if self.convert else seq_len > 1
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).squeeze(1)

    def make_inputs(self, batch_size, seed):
        return torch.randn(batch_size, 3, self.hidden, generator=torch.Generator().manual_seed(seed))


def test_a_shape_passed_where_an_op_takes_a_bool_is_captured():
    # Note [Recorded forwards]: a shape is a Python int in the recorded forward, as in eager. Under
    # torch.jit's tracer it was a 0-dim tensor, which is_causal refused.
    record = graphcheck.check(_CausalAttention)
    assert record.passed, record.explain()
    converted = graphcheck.check(_CausalAttention, scenario={"config": {"convert": True}})
    assert converted.passed, converted.explain()
