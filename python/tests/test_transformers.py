"""graphcheck.transformers: Hugging Face models checked with no code of their own. Tiny models
built from configs (offline), the wrapper's contract, clean runs of a Llama and two MoEs, and
planted bugs caught with the tensor named."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip(
    "transformers", reason="graphcheck.transformers needs the 'transformers' package (pip install transformers)")

import torch  # noqa: E402

import graphcheck  # noqa: E402
import graphcheck.transformers as gt  # noqa: E402

LLAMA = {"arch": "llama", "tie_word_embeddings": True}
QWEN3_MOE = {"arch": "qwen3_moe", "experts_implementation": gt.STATIC_EXPERTS}
MIXTRAL = {"arch": "mixtral", "experts_implementation": gt.STATIC_EXPERTS}
SCENARIO = {"capture": {"batch_sizes": [1, 2]}}


def scenario(config, **extra):
    return {**SCENARIO, "config": config, **extra}


@pytest.fixture(scope="module")
def llama():
    return gt.tiny(**LLAMA)


# ---- the wrapper's contract, without the engine ------------------------------------------------

def test_names_are_the_hf_state_dict_with_each_tied_weight_once(llama):
    hf = llama.hf_model
    assert hf.lm_head.weight is hf.model.embed_tokens.weight
    names = [n for n, _ in llama.named_parameters()]
    state = list(hf.state_dict())
    assert "lm_head.weight" in state and "lm_head.weight" not in names  # the tied alias, once
    assert names == [n for n in state if n != "lm_head.weight"]
    assert llama.tied_aliases() == {"lm_head.weight": "model.embed_tokens.weight"}
    assert llama.checkpoint_mapping() == []
    assert not any("inv_freq" in n for n in state), "non-persistent buffers are never checkpoint tensors"
    assert "model.rotary_emb.inv_freq" in dict(llama.named_buffers())
    assert not any(p.requires_grad for p in llama.parameters())


def test_load_weights_copies_in_place_and_names_what_it_loaded(llama):
    params = dict(llama.named_parameters())
    before = {n: p.data_ptr() for n, p in params.items()}
    weights = [(n, torch.full_like(p, 0.25)) for n, p in params.items()]
    assert llama.load_weights(iter(weights)) == set(params)
    assert {n: p.data_ptr() for n, p in llama.named_parameters()} == before
    assert all(p is params[n] for n, p in llama.named_parameters())
    assert torch.equal(llama.hf_model.lm_head.weight, torch.full_like(params["model.embed_tokens.weight"], 0.25))


def test_load_weights_rejects_unknown_tied_and_misshapen_tensors(llama):
    with pytest.raises(KeyError, match="model.layers.0.no_such.weight"):
        llama.load_weights([("model.layers.0.no_such.weight", torch.zeros(1))])
    with pytest.raises(KeyError, match="lm_head.weight.*tied to 'model.embed_tokens.weight'"):
        llama.load_weights([("lm_head.weight", torch.zeros(64, 32))])
    with pytest.raises(KeyError, match="non-persistent"):
        llama.load_weights([("model.rotary_emb.inv_freq", torch.zeros(4))])
    with pytest.raises(ValueError, match=r"\(32, 31\).*\(32,\)|\(32,\).*\(32, 31\)"):
        llama.load_weights([("model.norm.weight", torch.zeros(32, 31))])


def test_forward_returns_the_logits_of_seeded_inputs(llama):
    ids = llama.make_inputs(2, 7)
    assert ids.dtype == torch.long and ids.shape == (2, 8) and 0 <= int(ids.min()) and int(ids.max()) < 64
    assert torch.equal(ids, llama.make_inputs(2, 7)) and not torch.equal(ids, llama.make_inputs(2, 8))
    with torch.no_grad():
        logits = llama(ids)
        expected = llama.hf_model(input_ids=ids, use_cache=False).logits
    assert isinstance(logits, torch.Tensor) and logits.shape == (2, 8, 64)
    assert torch.equal(logits, expected)


def test_pwal_is_the_models_own_or_nothing():
    class WithPwal(transformers.LlamaForCausalLM):
        calls = 0

        def process_weights_after_loading(self):
            type(self).calls += 1

    config = gt.tiny_config("llama")
    model = gt.HFModel(WithPwal(config).eval())
    model.process_weights_after_loading()
    assert WithPwal.calls == 1
    gt.tiny(**LLAMA).process_weights_after_loading()  # HF models have none: a no-op


def test_static_experts_kernel_equals_transformers_batched_mm():
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    ours, theirs = gt.tiny(**QWEN3_MOE, seed=3), gt.tiny(arch="qwen3_moe", experts_implementation="batched_mm", seed=3)
    assert ours.hf_model.config._experts_implementation == gt.STATIC_EXPERTS
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), theirs(ids), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
def test_checkpoint_layout_is_what_save_pretrained_writes_and_loads_back(tmp_path, arch):
    """Live experts are fused (gate_up_proj [E, 2I, H]); save_pretrained writes them per expert.
    The checkpoint layout is the file's, and loading the file into a fresh model through it
    reproduces the saved model's logits (so the regions, gate before up, are right)."""
    from safetensors import safe_open

    saved_model = gt.tiny(arch=arch, layers=1, seed=5)
    live = {n: tuple(p.shape) for n, p in saved_model.named_parameters() if ".experts." in n}
    assert live == {"model.layers.0.mlp.experts.gate_up_proj": (4, 32, 32),
                    "model.layers.0.mlp.experts.down_proj": (4, 32, 16)}
    saved_model.hf_model.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        saved = {k: f.get_tensor(k) for k in f.keys()}
    fresh = gt.tiny(arch=arch, layers=1, seed=6)
    assert set(fresh._checkpoint_targets()) == set(saved)
    assert fresh.load_weights(iter(saved.items())) == set(saved)
    ids = saved_model.make_inputs(2, 1)
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids), saved_model(ids), rtol=0, atol=0)


# ---- the engine, end to end --------------------------------------------------------------------

def test_tiny_llama_with_tied_embeddings_and_rotary_passes_clean():
    record = graphcheck.check(gt.tiny, scenario=scenario(LLAMA))
    assert record.passed, record.explain()
    assert set(record["probes"]) >= {"address", "census", "coverage", "poison", "replay_diff"}, record["probes"]
    assert not record.findings, record.explain()


@pytest.mark.parametrize("config", [QWEN3_MOE, MIXTRAL], ids=["qwen3_moe", "mixtral"])
def test_tiny_moe_passes_clean(config):
    record = graphcheck.check(gt.tiny, scenario=scenario(config, cycles=[
        {"refit": {"seed": 2}}, {"refit": {"seed": 3, "only": ["model.layers.1."]}}]))
    assert record.passed, record.explain()
    assert not record.findings, record.explain()


@pytest.mark.parametrize("kernel", ["batched_mm", "grouped_mm"])
def test_tiny_moe_with_transformers_own_experts_kernels_passes_clean(kernel):
    """batched_mm's `repeat_interleave(top_k_index.size(-1))` takes the int overload, as under a
    CUDA capture (under torch.jit's tracer it took the Tensor one, whose CPU kernel calls
    aten::item), and the CPU _grouped_mm reads its offsets back where the CUDA kernel does not:
    neither is a host sync of a CUDA capture, and neither is reported as one."""
    record = graphcheck.check(gt.tiny, scenario=scenario({"arch": "qwen3_moe", "experts_implementation": kernel}))
    assert record.passed, record.explain()


def test_eager_experts_loop_is_a_real_host_sync():
    """transformers' eager experts route tokens with a data-dependent loop (nonzero / item on the
    router's choice): that is a host sync a CUDA graph cannot capture, and it is reported."""
    record = graphcheck.check(gt.tiny, scenario=scenario({"arch": "qwen3_moe", "experts_implementation": "eager"}))
    assert not record.passed
    assert any("host sync" in f["message"] for f in record.findings), record.explain()


class RebindAfterRefit(gt.HFModel):
    """A planted bug: after a refit, PWAL replaces a parameter with a new nn.Parameter
    (``module.weight = nn.Parameter(module.weight.clone())``)."""

    def __init__(self, model, target):
        super().__init__(model)
        self.target = target
        self.loads_seen = 0

    def load_weights(self, weights):
        self.loads_seen += 1
        return super().load_weights(weights)

    def process_weights_after_loading(self):
        super().process_weights_after_loading()
        if self.loads_seen > 1:  # a refit
            path, _, attr = self.target.rpartition(".")
            module = self.get_submodule(path)
            setattr(module, attr, torch.nn.Parameter(getattr(module, attr).clone()))


@pytest.mark.parametrize("config, target", [
    (LLAMA, "model.layers.1.self_attn.o_proj.weight"),
    (QWEN3_MOE, "model.layers.0.mlp.experts.gate_up_proj"),  # a fused 3-D experts tensor
], ids=["llama-o_proj", "qwen3_moe-gate_up_proj"])
def test_rebound_parameter_after_refit_is_caught_and_named(config, target):
    record = graphcheck.check(lambda **cfg: RebindAfterRefit(gt.tiny(**cfg).hf_model, target),
                              scenario=scenario(config))
    assert not record.passed
    address = [f for f in record.findings if f["probe"] == "address"]
    assert address, record.explain()
    assert all(f["subject"] == target for f in address), record.explain()
    assert {f["cycle"] for f in address} == {1, 2}, record.explain()
    assert any(f["probe"] == "replay_diff" for f in record.findings), record.explain()


def test_registered_mutation_is_caught_and_names_the_tensor():
    record = graphcheck.check(gt.tiny, scenario=scenario(LLAMA), mutations=[gt.REBIND_AFTER_REFIT])
    assert not record.passed
    address = [f for f in record.findings if f["probe"] == "address"]
    assert address and all(f["subject"] == "model.norm.weight" for f in address), record.explain()


@pytest.mark.parametrize("name", ["hf_llama_tiny.yaml", "hf_moe_tiny.yaml"])
def test_scenario_files_pass(repo, name):
    record = graphcheck.check(None, scenario=repo / "scenarios/python" / name)
    assert record.passed, record.explain()
