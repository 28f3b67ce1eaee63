"""graphcheck for Hugging Face transformers models, with no code of their own.

``HFModel`` wraps any ``transformers.PreTrainedModel`` in the graphcheck model contract
(``graphcheck._model``)::

    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    graphcheck.check(lambda: graphcheck.transformers.HFModel(model, seq_len=8))

and ``tiny`` builds a tiny model of a known architecture from scalar keyword arguments, so that a
scenario file needs no Python of its own::

    model: {python: "graphcheck.transformers:tiny", config: {arch: llama, layers: 2}}

What the wrapper promises:

* Its tensor names are the Hugging Face model's own (``model.layers.0.self_attn.q_proj.weight``,
  ``lm_head.weight``): the wrapper shares the model's submodules, parameters and buffers, it does
  not nest the model under a prefix.
* The checkpoint is the model's ``state_dict()`` layout, with each tied weight once: the tied alias
  (``lm_head.weight`` with ``tie_word_embeddings``) is the same ``nn.Parameter`` as its source,
  ``named_parameters()`` lists it once, and so does the checkpoint. Non-persistent buffers (rotary
  ``inv_freq``) are never in it. MoE experts are in the live fused layout
  (``mlp.experts.gate_up_proj`` ``[E, 2I, H]``, ``mlp.experts.down_proj`` ``[E, H, I]``), and the
  checkpoint holds them per expert as ``save_pretrained()`` writes them
  (``mlp.experts.{e}.gate_proj.weight``): each is a region of the fused tensor, see
  ``checkpoint_mapping()``.
* ``load_weights`` copies in place (``param.copy_``), never rebinds.
* ``process_weights_after_loading`` runs the model's own one when it defines one; Hugging Face
  models have none, so it does nothing.
* ``forward(input_ids)`` runs with ``use_cache=False`` and returns the logits only.
* Every parameter has ``requires_grad`` False.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

import graphcheck

from ._model import PERSISTENT_BUFFER, ModelAdapter, load_tensor

try:  # the optional dependency: the module imports without it, the factories say what is missing
    import transformers as _hf
except ImportError as _e:  # pragma: no cover - exercised where transformers is absent
    _hf = None
    _HF_IMPORT_ERROR: ImportError | None = _e
else:
    _HF_IMPORT_ERROR = None

__all__ = ["HFModel", "REBIND_AFTER_REFIT", "STATIC_EXPERTS", "from_config", "tiny", "tiny_config"]

REBIND_AFTER_REFIT = graphcheck.mutation(
    "hf.rebind_parameter_after_refit",
    "HFModel's PWAL replaces model.norm.weight with a new nn.Parameter on every call but the "
    "first (after a refit): the captured graph keeps reading the old storage")


def _require_transformers() -> Any:
    if _hf is None:
        raise ImportError(
            "graphcheck.transformers needs the 'transformers' package "
            f"({_HF_IMPORT_ERROR}): pip install transformers") from _HF_IMPORT_ERROR
    return _hf


class HFModel(torch.nn.Module):
    """A ``transformers.PreTrainedModel`` in the graphcheck model contract.

    ``model``: the model (a causal LM: its output has ``logits``). ``seq_len``: the length of
    the ``input_ids`` ``make_inputs`` draws. ``vocab_size``: the range of the ids (the model
    config's ``vocab_size`` by default). ``rebind_target``: the module whose ``weight`` the
    ``hf.rebind_parameter_after_refit`` mutation replaces.
    """

    rebind_target = "model.norm"

    def __init__(self, model: torch.nn.Module, seq_len: int = 8, vocab_size: int | None = None,
                 rebind_target: str | None = None, checkpoint_layout: str = "save_pretrained") -> None:
        super().__init__()
        if checkpoint_layout not in ("save_pretrained", "live"):
            raise ValueError(f"checkpoint_layout is 'save_pretrained' or 'live', not '{checkpoint_layout}'")
        self.checkpoint_layout = checkpoint_layout
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"HFModel wraps a torch.nn.Module (a transformers PreTrainedModel), "
                            f"not {type(model).__name__}")
        config = getattr(model, "config", None)
        vocab = vocab_size if vocab_size is not None else getattr(config, "vocab_size", None)
        if vocab is None:
            raise ValueError(f"{type(model).__name__} has no config.vocab_size: pass vocab_size=")
        if seq_len < 1:
            raise ValueError(f"seq_len must be at least 1, not {seq_len}")
        # Not registered as a submodule: the wrapper *is* the model's module tree (shared dicts),
        # so that every name is the Hugging Face one, without a prefix.
        object.__setattr__(self, "hf_model", model)
        self._parameters = model._parameters
        self._buffers = model._buffers
        self._non_persistent_buffers_set = model._non_persistent_buffers_set
        self._modules = model._modules
        self.seq_len = int(seq_len)
        self.vocab_size = int(vocab)
        if rebind_target is not None:
            self.rebind_target = rebind_target
        self.pwal_calls = 0  # PWAL runs after every load (checkpoint, dummy, refit): the mutation's trigger
        model.eval()
        self.eval()
        for p in self.parameters():
            p.requires_grad_(False)

    def extra_repr(self) -> str:
        return f"{type(self.hf_model).__name__}, seq_len={self.seq_len}"

    # ---- the checkpoint ----------------------------------------------------------------------

    def _targets(self) -> dict[str, torch.Tensor]:
        """Every checkpoint tensor by name: parameters (each tied weight once) and persistent
        buffers."""
        out = dict(self.named_parameters())
        for name, buf, kind in ModelAdapter._buffers(self, "", recurse=True):
            if kind == PERSISTENT_BUFFER and name not in out:
                out[name] = buf
        return out

    def tied_aliases(self) -> dict[str, str]:
        """The names under which a tied tensor appears a second time ({alias: loaded name}):
        ``{"lm_head.weight": "model.embed_tokens.weight"}`` with tied embeddings."""
        first: dict[int, str] = {}
        aliases: dict[str, str] = {}
        for name, p in self.named_parameters(remove_duplicate=False):
            if id(p) in first:
                aliases[name] = first[id(p)]
            else:
                first[id(p)] = name
        return aliases

    def checkpoint_mapping(self) -> list[graphcheck.CheckpointShard]:
        """The checkpoint layout against the live one.

        With ``checkpoint_layout="save_pretrained"`` (the default) the checkpoint is what
        ``save_pretrained()`` writes: transformers keeps MoE experts fused in the live model
        (``mlp.experts.gate_up_proj`` ``[E, 2I, H]``, ``down_proj`` ``[E, H, I]``) and writes them
        per expert (``mlp.experts.{e}.gate_proj.weight`` ``[I, H]``, ``up_proj``, ``down_proj``
        ``[H, I]``; Mixtral: ``block_sparse_moe.experts.{e}.w1/w3/w2.weight`` and
        ``block_sparse_moe.gate.weight``). Each per-expert tensor is a region of expert ``e`` of
        the fused tensor. With ``checkpoint_layout="live"`` it is the live ``state_dict()``."""
        if self.checkpoint_layout == "live":
            return []
        model_type = getattr(getattr(self.hf_model, "config", None), "model_type", "")
        block, gate, up, down = _EXPERT_NAMES.get(model_type, _EXPERT_NAMES[""])
        params = dict(self.named_parameters())
        out: list[graphcheck.CheckpointShard] = []
        for path, module in self.named_modules():
            gate_up, down_proj = module._parameters.get("gate_up_proj"), module._parameters.get("down_proj")
            if gate_up is None or down_proj is None or gate_up.dim() != 3 or down_proj.dim() != 3:
                continue
            if getattr(module, "is_transposed", False) or module._parameters.get("gate_up_proj_bias") is not None:
                continue  # [E, H, 2I] kernels (GPT-OSS) and fused biases: kept in the live layout
            saved = _rename_block(path, block)
            rows = gate_up.shape[1] // 2
            for e in range(gate_up.shape[0]):
                out += [graphcheck.CheckpointShard(f"{saved}.{e}.{gate}.weight", f"{path}.gate_up_proj", 0, 0, rows, e),
                        graphcheck.CheckpointShard(f"{saved}.{e}.{up}.weight", f"{path}.gate_up_proj", 0, rows, rows, e),
                        graphcheck.CheckpointShard(f"{saved}.{e}.{down}.weight", f"{path}.down_proj", 0, 0,
                                                   down_proj.shape[1], e)]
            router = path.rsplit(".", 1)[0] + ".gate.weight"
            if block != "mlp" and router in params:  # the renamed block's router: a rename
                out.append(graphcheck.CheckpointShard(_rename_block(router, block), router, 0, 0,
                                                      params[router].shape[0]))
        return out

    def _checkpoint_targets(self) -> dict[str, torch.Tensor]:
        """Every checkpoint name with the live tensor or region it loads into."""
        targets = self._targets()
        shards = self.checkpoint_mapping()
        params = dict(self.named_parameters())
        for shard in shards:
            live = params[shard.live]
            within = live[shard.index] if shard.index >= 0 else live
            targets[shard.checkpoint] = within.narrow(shard.dim, shard.offset, shard.size)
        for shard in shards:
            targets.pop(shard.live, None)
        return targets

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        targets = self._checkpoint_targets()
        aliases = self.tied_aliases()
        non_persistent = {n for n, _, kind in ModelAdapter._buffers(self, "", recurse=True)
                          if kind != PERSISTENT_BUFFER}
        loaded: set[str] = set()
        with torch.no_grad():
            for name, tensor in weights:
                param = targets.get(name)
                if param is None:
                    if name in aliases:
                        raise KeyError(f"checkpoint tensor '{name}' is tied to '{aliases[name]}' in "
                                       f"{type(self.hf_model).__name__}: the checkpoint carries '{aliases[name]}' only")
                    if name in non_persistent:
                        raise KeyError(f"checkpoint tensor '{name}' is a non-persistent buffer of "
                                       f"{type(self.hf_model).__name__}: checkpoints never carry it")
                    raise KeyError(f"checkpoint tensor '{name}' names no parameter or persistent buffer "
                                   f"of {type(self.hf_model).__name__}")
                load_tensor(name, param, tensor)
                loaded.add(name)
        return loaded

    def process_weights_after_loading(self) -> None:
        self.pwal_calls += 1
        own = getattr(self.hf_model, "process_weights_after_loading", None)
        if callable(own):
            own()
        if graphcheck.enabled(REBIND_AFTER_REFIT) and self.pwal_calls > 1:
            # The bug: a new nn.Parameter instead of an in-place update. The values are the same
            # now; the captured graph keeps the old storage, which later refits no longer write.
            module = self.get_submodule(self.rebind_target)
            module.weight = torch.nn.Parameter(module.weight.detach().clone(), requires_grad=False)

    # ---- running -----------------------------------------------------------------------------

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.hf_model(input_ids=input_ids, use_cache=False, return_dict=True)
        return out.logits

    def make_inputs(self, batch_size: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(int(seed))
        ids = torch.randint(0, self.vocab_size, (int(batch_size), self.seq_len), generator=g, dtype=torch.long)
        device = next(iter(self.parameters()), torch.empty(0)).device
        return ids.to(device)


# model_type -> (the MoE block's name in checkpoints, gate, up and down projection names).
_EXPERT_NAMES = {"": ("mlp", "gate_proj", "up_proj", "down_proj"),
                 "mixtral": ("block_sparse_moe", "w1", "w3", "w2")}


def _rename_block(path: str, block: str) -> str:
    """``model.layers.0.mlp.experts`` with the MoE block as checkpoints name it."""
    if block == "mlp":
        return path
    head, sep, tail = path.rpartition(".mlp.")
    return f"{head}.{block}.{tail}" if sep else path


# ---- an experts kernel the emulated backend can capture ---------------------------------------

STATIC_EXPERTS = "graphcheck_batched_mm"


def _static_batched_mm_experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor,
                                       top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' ``batched_mm`` experts forward (``integrations/moe.py``), with one change:
    each token is replicated ``top_k`` times by ``expand`` + ``reshape`` instead of
    ``repeat_interleave(top_k, dim=0)`` (the same values, in the same order).

    Why it exists: under torch.jit's tracer, which the emulated backend captured with before
    Note [Recorded forwards], ``top_k_index.size(-1)`` was a 0-dim tensor, so
    ``repeat_interleave`` took its Tensor-repeats overload, whose CPU kernel calls ``aten::item``:
    a host sync the int overload a CUDA graph capture runs does not have. The emulated backend
    now records transformers' own ``batched_mm`` as it is; this kernel stays for the scenarios that
    name it. The weights (fused 3-D ``gate_up_proj`` / ``down_proj``) and every other step are
    transformers' own."""
    from transformers.integrations.moe import _batched_linear

    num_top_k = top_k_index.size(-1)
    num_tokens = hidden_states.size(0)
    hidden_dim = hidden_states.size(-1)
    selected_hidden_states = hidden_states.unsqueeze(1).expand(-1, num_top_k, -1).reshape(-1, hidden_dim)
    sample_weights = top_k_weights.reshape(-1)
    expert_ids = top_k_index.reshape(-1)
    sentinel_mask = None
    if getattr(self, "_is_expert_parallel", False):
        sentinel_mask = expert_ids >= self.num_experts
        expert_ids = expert_ids.clamp(0, self.num_experts - 1)
    if self.has_gate:
        weights = self.gate_up_proj[expert_ids]
        biases = self.gate_up_proj_bias[expert_ids] if self.has_bias else None
    else:
        weights = self.up_proj[expert_ids]
        biases = self.up_proj_bias[expert_ids] if self.has_bias else None
    out = _batched_linear(selected_hidden_states, weights, bias=biases, is_transposed=self.is_transposed)
    out = self._apply_gate(out) if self.has_gate else self.act_fn(out)
    weights = self.down_proj[expert_ids]
    biases = self.down_proj_bias[expert_ids] if self.has_bias else None
    out = _batched_linear(out, weights, bias=biases, is_transposed=self.is_transposed)
    if getattr(self, "has_post_expert_norm", False):
        out = self.post_expert_norm(out)
    if sentinel_mask is not None:
        sample_weights = sample_weights.masked_fill(sentinel_mask, 0.0)
    weighted = out * sample_weights.unsqueeze(-1)
    return weighted.view(num_tokens, num_top_k, hidden_dim).sum(dim=1).to(hidden_states.dtype)


def _register_static_experts() -> None:
    from transformers.integrations.moe import ExpertsInterface

    if STATIC_EXPERTS not in ExpertsInterface._global_mapping:
        ExpertsInterface.register(STATIC_EXPERTS, _static_batched_mm_experts_forward)


# ---- factories --------------------------------------------------------------------------------

_ARCHS = ("llama", "qwen3", "qwen3_moe", "mixtral")
_MOE_ARCHS = ("qwen3_moe", "mixtral")


def from_config(config: Any, *, seq_len: int = 8, seed: int = 0, attn_implementation: str = "eager",
                experts_implementation: str | None = None, dtype: torch.dtype = torch.float32) -> HFModel:
    """``AutoModelForCausalLM.from_config(config)`` in eval mode, wrapped. ``seed`` seeds the
    initial weights (the global RNG is left as it was); ``experts_implementation`` picks the MoE
    experts kernel: transformers' ``batched_mm`` has static shapes and no host sync under a CUDA
    graph; ``graphcheck_batched_mm`` is the same kernel written with ``expand`` (see
    ``_static_batched_mm_experts_forward``)."""
    hf = _require_transformers()
    kwargs: dict[str, Any] = {"attn_implementation": attn_implementation, "dtype": dtype}
    if experts_implementation == STATIC_EXPERTS:
        _register_static_experts()
    if experts_implementation is not None:
        kwargs["experts_implementation"] = experts_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = hf.AutoModelForCausalLM.from_config(config, **kwargs)
    return HFModel(model.eval(), seq_len=seq_len)


def tiny_config(arch: str = "llama", *, vocab: int = 64, hidden: int = 32, layers: int = 2, heads: int = 4,
                kv_heads: int = 2, intermediate: int = 64, experts: int = 4, top_k: int = 2,
                moe_intermediate: int = 16, tie_word_embeddings: bool | None = None,
                max_positions: int = 64) -> Any:
    """The ``transformers`` config of a tiny model of architecture ``arch``."""
    hf = _require_transformers()
    if arch not in _ARCHS:
        raise ValueError(f"unknown arch '{arch}': one of {', '.join(_ARCHS)}")
    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, max_position_embeddings=max_positions)
    if tie_word_embeddings is not None:
        common["tie_word_embeddings"] = bool(tie_word_embeddings)
    if arch == "llama":
        return hf.LlamaConfig(intermediate_size=intermediate, **common)
    if arch == "qwen3":
        return hf.Qwen3Config(intermediate_size=intermediate, head_dim=hidden // heads, **common)
    if arch == "qwen3_moe":
        return hf.Qwen3MoeConfig(intermediate_size=intermediate, moe_intermediate_size=moe_intermediate,
                                 num_experts=experts, num_experts_per_tok=top_k, decoder_sparse_step=1,
                                 mlp_only_layers=[], head_dim=hidden // heads, **common)
    return hf.MixtralConfig(intermediate_size=moe_intermediate, num_local_experts=experts,
                            num_experts_per_tok=top_k, **common)


def tiny(arch: str = "llama", *, vocab: int = 64, hidden: int = 32, layers: int = 2, heads: int = 4,
         kv_heads: int = 2, intermediate: int = 64, experts: int = 4, top_k: int = 2, moe_intermediate: int = 16,
         tie_word_embeddings: bool | None = None, max_positions: int = 64, seq_len: int = 8, seed: int = 0,
         experts_implementation: str = "batched_mm") -> HFModel:
    """A tiny model of architecture ``arch`` (llama, qwen3, qwen3_moe, mixtral), wrapped: the
    factory for scenario files (every argument is a scalar). ``experts``, ``top_k``,
    ``moe_intermediate`` and ``experts_implementation`` apply to the MoE architectures."""
    config = tiny_config(arch, vocab=vocab, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
                         intermediate=intermediate, experts=experts, top_k=top_k,
                         moe_intermediate=moe_intermediate, tie_word_embeddings=tie_word_embeddings,
                         max_positions=max_positions)
    return from_config(config, seq_len=seq_len, seed=seed,
                       experts_implementation=experts_implementation if arch in _MOE_ARCHS else None)
