"""The Python model contract, as the engine sees it.

`ModelAdapter` wraps a user's ``torch.nn.Module`` and answers everything the C++ engine asks
(its tensor catalog, loads, PWAL, forward, inputs). The extension calls it with the GIL held;
nothing here runs while the engine works.

The contract mirrors vLLM's model code:

* required: ``load_weights(weights) -> set[str]`` (or None, as SGLang's: the names it took
  from the stream), ``process_weights_after_loading()``,
  ``forward(*inputs)``, ``make_inputs(batch_size, seed)`` (a tensor, a tuple of tensors, or,
  as Hugging Face models take them, a dict of the forward's keyword arguments, whose other values
  are plain and the same at every call);
* optional: ``checkpoint_mapping()`` (or vLLM's ``stacked_params_mapping``), ``extra_tensors()``,
  ``expected_hooks()``, ``load_dummy_weights(seed)``, ``stage_for_refit()``,
  ``synthesize_checkpoint(seed)``.

Per-tensor attributes ride on the tensors, as ``set_weight_attrs`` puts them there:
``weight_loader(param, loaded)`` and ``dummy_weight_value``.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Iterable, Iterator

import torch

PARAMETER = "parameter"
PERSISTENT_BUFFER = "persistent_buffer"
NON_PERSISTENT_BUFFER = "non_persistent_buffer"
EXTRA = "extra"

_REQUIRED = ("load_weights", "process_weights_after_loading", "forward", "make_inputs")

# Module attributes that are torch.nn.Module machinery, never the model's own state.
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()).keys())


@dataclass(frozen=True)
class ExpectedHook:
    """A lifecycle hook the model promises to run (the hooks probe checks it).

    ``module``: a module path pattern ("layers.*", "**" for every submodule, "(root)" for the
    model itself, which no wildcard matches); ``on``: the loads it must run on (on a refit that
    streams some prefixes only, a module none of whose tensors lies under them need not run it);
    ``after``: hooks that must run before it in the same load.
    """

    module: str
    hook: str
    on: tuple[str, ...] = ("checkpoint", "dummy", "refit")
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckpointShard:
    """Rows ``[offset, offset + size)`` along ``dim`` of live tensor ``live`` hold checkpoint
    tensor ``checkpoint`` (vLLM's fused ``qkv_proj`` holding ``q_proj``, ``k_proj``, ``v_proj``).
    With ``index`` >= 0 the region lies in expert ``index`` of a fused experts tensor
    (transformers' ``mlp.experts.gate_up_proj`` holding ``mlp.experts.3.up_proj.weight``).

    ``size=None`` takes all of ``dim``. ``permute``: the region holds the checkpoint tensor with its
    dims permuted, ``region == checkpoint.permute(permute)``; ``(1, 0)`` is a transpose (a kernel
    that wants ``[in, out]`` of a checkpoint's ``[out, in]``):
    ``CheckpointShard("proj.weight", "proj.weight_t", permute=(1, 0))``. dim, offset and size stay
    in the live tensor's orientation; the census, synthesis, model B and the messages speak the
    checkpoint's."""

    checkpoint: str
    live: str
    dim: int = 0
    offset: int = 0
    size: int | None = None
    index: int = -1  # >= 0: expert ``index`` of a fused [experts, ...] tensor first, then the region
    permute: tuple[int, ...] = ()


def set_weight_attrs(tensor: torch.Tensor, attrs: dict[str, Any] | None) -> None:
    """vLLM's ``set_weight_attrs``: put attributes such as ``weight_loader`` or
    ``dummy_weight_value`` on a tensor. Existing attributes are never overwritten silently."""
    for key, value in (attrs or {}).items():
        if hasattr(tensor, key):
            raise AttributeError(f"overwriting existing tensor attribute: {key}")
        setattr(tensor, key, value)


class _TakenNames:
    """The weights iterable as the model sees it, recording the name of each item it takes (for a
    load_weights() that returns None); anything else is the wrapped object's."""

    def __init__(self, weights: Iterable[tuple[str, torch.Tensor]]):
        self._weights = weights
        self._it: Any = None
        self.names: list[str] = []

    def __iter__(self):
        self._it = iter(self._weights)
        return self

    def __next__(self):
        if self._it is None:
            self._it = iter(self._weights)
        item = next(self._it)
        self.names.append(item[0])
        return item

    def __getattr__(self, name: str) -> Any:
        if name == "_weights":  # not set yet (a copy made without __init__)
            raise AttributeError(name)
        return getattr(self._weights, name)


class ContractError(TypeError):
    """The model does not implement the contract (a user error: the CLI exits 2)."""


class ModelAdapter:
    """The engine's view of one Python model instance."""

    def __init__(self, model: torch.nn.Module, source: str = "") -> None:
        if not isinstance(model, torch.nn.Module):
            raise ContractError(
                f"{source or 'the factory'} returned {type(model).__name__}, not a torch.nn.Module: "
                "return the model instance")
        missing = [name for name in _REQUIRED if not callable(getattr(model, name, None))]
        if missing:
            raise ContractError(
                f"{type(model).__name__} ({source}) lacks {', '.join(m + '()' for m in missing)}: "
                "a graphcheck model implements load_weights(weights) -> set[str] (or None), "
                "process_weights_after_loading(), forward(*inputs) and make_inputs(batch_size, seed)")
        self.model = model
        self.source = source

    # ---- the tensor catalog ------------------------------------------------------------------

    def registered_tensors(self) -> list[tuple[str, torch.Tensor, str]]:
        out = [(name, p, PARAMETER) for name, p in self.model.named_parameters()]
        out += self._buffers(self.model, "", recurse=True)
        return out

    def extra_tensors(self) -> list[tuple[str, torch.Tensor, str]]:
        """The model's own ``extra_tensors()`` plus every plain tensor a submodule holds (in an
        attribute, a list, tuple or dict, a ``functools.partial`` or a closure), so that findings
        name them instead of calling them undeclared."""
        registered = {id(t) for _, t, _ in self.registered_tensors()}
        out: list[tuple[str, torch.Tensor, str]] = []
        seen: set[int] = set(registered)
        declared = getattr(self.model, "extra_tensors", None)
        if callable(declared):
            for name, tensor in declared():
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    out.append((name, tensor, EXTRA))
        for path, module in self.model.named_modules():
            for attr, value in vars(module).items():
                if attr in _MODULE_INTERNALS:
                    continue
                prefix = f"{path}.{attr}" if path else attr
                for name, tensor in _plain_tensors(prefix, value, depth=0, visited=set()):
                    if id(tensor) not in seen:
                        seen.add(id(tensor))
                        out.append((name, tensor, EXTRA))
        return out

    def modules(self) -> list[tuple[str, torch.nn.Module]]:
        return list(self.model.named_modules())

    def module_tensors(self, module: torch.nn.Module, recurse: bool) -> list[tuple[str, torch.Tensor, str]]:
        out = [(name, p, PARAMETER) for name, p in module.named_parameters(recurse=recurse)]
        out += self._buffers(module, "", recurse=recurse)
        return out

    @staticmethod
    def _buffers(module: torch.nn.Module, prefix: str, recurse: bool) -> list[tuple[str, torch.Tensor, str]]:
        out = []
        seen: set[int] = set()
        modules = module.named_modules() if recurse else [("", module)]
        for path, m in modules:
            for name, b in m._buffers.items():
                if b is None or id(b) in seen:
                    continue
                seen.add(id(b))
                kind = NON_PERSISTENT_BUFFER if name in m._non_persistent_buffers_set else PERSISTENT_BUFFER
                out.append((f"{path}.{name}" if path else name, b, kind))
        return out

    @staticmethod
    def attributes(tensor: torch.Tensor) -> tuple[Any, Any]:
        """(dummy_weight_value or None, weight_loader or None)."""
        return getattr(tensor, "dummy_weight_value", None), getattr(tensor, "weight_loader", None)

    def to(self, device: str) -> None:
        """Parameters and buffers by ``Module.to`` (in place: identities survive), and every plain
        tensor the catalog found, in place too (``t.data = ...``), so that the forward does not mix
        devices."""
        self.model.to(device)
        for _, tensor, _ in self.extra_tensors():
            if tensor.device != torch.device(device):
                tensor.data = tensor.data.to(device)

    # ---- the lifecycle -----------------------------------------------------------------------

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
        taken = _TakenNames(weights)
        with torch.no_grad():
            loaded = self.model.load_weights(taken)
        if loaded is None:
            # SGLang's contract: load_weights() returns nothing. What it took from the stream is
            # what it reports loaded; the census still proves each of those was written.
            loaded = taken.names
        return sorted(str(n) for n in loaded)

    def process_weights_after_loading(self) -> None:
        with torch.no_grad():
            self.model.process_weights_after_loading()

    def stage_for_refit(self) -> None:
        stage = getattr(self.model, "stage_for_refit", None)
        if callable(stage):
            with torch.no_grad():
                stage()

    def forward(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        keywords = self._keywords(inputs)
        with torch.no_grad():
            if keywords is None:
                out = self.model(*inputs)
            else:
                names, constants = keywords
                out = self.model(**constants, **dict(zip(names, inputs)))
        return _tensor_list(out, f"{type(self.model).__name__}.forward()")

    def make_inputs(self, batch_size: int, seed: int) -> list[torch.Tensor]:
        out = self.model.make_inputs(batch_size, seed)
        what = f"{type(self.model).__name__}.make_inputs()"
        if not isinstance(out, Mapping):
            return _tensor_list(out, what)
        # Hugging Face style: the forward's keyword arguments. The engine passes tensors, so the
        # tensors go as a list in the mapping's order, and the rest (flags, None) are kept here
        # and passed with them to every forward of this model and of its other instances
        # (model B is another instance: it never sees make_inputs()).
        if not all(isinstance(k, str) for k in out):
            raise ContractError(f"{what} returned a mapping with keys that are not names ({', '.join(repr(k) for k in out)}): "
                                "return the forward's keyword arguments by name")
        names = [k for k, v in out.items() if isinstance(v, torch.Tensor)]
        constants = {k: v for k, v in out.items() if not isinstance(v, torch.Tensor)}
        if not names:
            raise ContractError(f"{what} returned a mapping with no tensor in it ({', '.join(out) or 'empty'}): "
                                "return the forward's tensor arguments, by name or in order")
        for k, v in constants.items():
            if not _plain(v):
                raise ContractError(
                    f"{what} returned {k}={type(v).__name__}: besides tensors, the keyword arguments it returns "
                    "are passed as they are to every forward, model B's too, so they must be plain values "
                    "(None, bool, int, float, str, or tuples of them); make a cache or a list of tensors in forward")
        known = getattr(self, "_keyword_inputs", None)
        if known is not None and (known[0] != names or known[1] != constants):
            raise ContractError(
                f"{what} returned the keyword arguments {names} (tensors) and {constants} (other values) "
                f"at batch size {batch_size}, but {known[0]} and {known[1]} before: return the same names and "
                "values at every batch size and seed, in the same order (the tensors may change)")
        _KEYWORD_INPUTS[type(self.model)] = (names, constants)
        self._keyword_inputs = (names, constants)
        return [out[k] for k in names]

    def _keywords(self, inputs: list[torch.Tensor]) -> tuple[list[str], dict[str, Any]] | None:
        """The keyword names of the forward's inputs, where make_inputs() gave a mapping (it may
        have been asked on another instance of the model: model B's forward)."""
        keywords = getattr(self, "_keyword_inputs", None) or _KEYWORD_INPUTS.get(type(self.model))
        if keywords is not None and len(keywords[0]) != len(inputs):
            raise ContractError(
                f"{type(self.model).__name__}.forward() is given {len(inputs)} tensors, but make_inputs() "
                f"named {len(keywords[0])} ({', '.join(keywords[0])})")
        return keywords

    def checkpoint_mapping(self) -> list[tuple[str, str, int, int, int, int, tuple[int, ...]]]:
        mapping = getattr(self.model, "checkpoint_mapping", None)
        if callable(mapping):
            return [_shard_tuple(s) for s in mapping()]
        stacked = getattr(self.model, "stacked_params_mapping", None)
        if stacked:
            return _from_stacked(self.model, stacked)
        return []

    _TP_KINDS = ("column", "row", "vocab", "replicated", "split_dim")

    def tensor_parallel(self) -> list[tuple[str, str, int]]:
        """The model's ``tensor_parallel()``: a dict ``{pattern: kind}`` or a list of ``(pattern,
        kind)`` pairs, kind one of "column", "row", "vocab", "replicated" or ``("split_dim", dim)``."""
        spec = getattr(self.model, "tensor_parallel", None)
        if not callable(spec):
            return []
        value = spec()
        items = value.items() if isinstance(value, dict) else value
        out = []
        for item in items:
            pattern, kind = item
            dim = 0
            if isinstance(kind, (tuple, list)):
                kind, dim = kind
            if kind not in self._TP_KINDS:
                raise ContractError(f"tensor_parallel(): '{pattern}' has kind {kind!r}: use one of "
                                    f"{', '.join(self._TP_KINDS)} (split_dim as ('split_dim', dim))")
            out.append((str(pattern), str(kind), int(dim)))
        return out

    def expected_hooks(self) -> list[tuple[str, str, list[str], list[str]]]:
        hooks = getattr(self.model, "expected_hooks", None)
        if not callable(hooks):
            return []
        out = []
        for h in hooks():
            if isinstance(h, ExpectedHook):
                out.append((h.module, h.hook, list(h.on), list(h.after)))
            elif isinstance(h, (tuple, list)) and len(h) >= 2:
                out.append((str(h[0]), str(h[1]), list(h[2]) if len(h) > 2 else ["checkpoint", "dummy", "refit"],
                            list(h[3]) if len(h) > 3 else []))
            else:
                raise ContractError(f"expected_hooks() returned {h!r}: return graphcheck.ExpectedHook(module, hook)")
        return out

    def load_dummy_weights(self, seed: int) -> bool:
        """Runs the model's own dummy loader; False when it has none (graphcheck's is used)."""
        own = getattr(self.model, "load_dummy_weights", None)
        if not callable(own):
            return False
        with torch.no_grad():
            own(seed)
        return True

    def synthesize_checkpoint(self, seed: int) -> list[tuple[str, torch.Tensor]] | None:
        own = getattr(self.model, "synthesize_checkpoint", None)
        if not callable(own):
            return None
        items = own(seed)
        if isinstance(items, dict):
            items = items.items()
        return [(str(n), t) for n, t in items]


def default_weight_loader(param: torch.Tensor, loaded_weight: torch.Tensor) -> None:
    """vLLM's ``default_weight_loader``: an in-place copy, so that every address a captured graph
    holds stays valid. A shape or dtype mismatch is an error naming both."""
    if param.shape != loaded_weight.shape or param.dtype != loaded_weight.dtype:
        raise ValueError(f"checkpoint tensor is {tuple(loaded_weight.shape)} {loaded_weight.dtype}, "
                         f"the parameter {tuple(param.shape)} {param.dtype}: regenerate the checkpoint "
                         "for this config, or fix the model's shapes")
    with torch.no_grad():
        param.copy_(loaded_weight)


def load_tensor(name: str, param: torch.Tensor, loaded_weight: torch.Tensor) -> None:
    """Loads checkpoint tensor ``name`` into ``param`` in place, through ``param.weight_loader``
    when it has one (``set_weight_attrs``), else :func:`default_weight_loader`."""
    loader = getattr(param, "weight_loader", None) or default_weight_loader
    try:
        with torch.no_grad():
            loader(param, loaded_weight)
    except ValueError as e:
        raise ValueError(f"checkpoint tensor '{name}': {e}") from None


def default_load_weights(model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
    """A loader for models that have no mapping of their own: each streamed tensor is loaded into
    the parameter or persistent buffer of that name with :func:`load_tensor`."""
    params = dict(model.named_parameters())
    params.update({n: b for n, b, kind in ModelAdapter._buffers(model, "", recurse=True) if kind == PERSISTENT_BUFFER})
    loaded = set()
    for name, tensor in weights:
        if name not in params:
            raise KeyError(f"checkpoint tensor '{name}' names no parameter or persistent buffer of "
                           f"{type(model).__name__}")
        load_tensor(name, params[name], tensor)
        loaded.add(name)
    return loaded


# The keyword names (and the non-tensor values) of the inputs make_inputs() last gave as a
# mapping, per model class: model B and the other instances a pass builds take model A's.
_KEYWORD_INPUTS: dict[type, tuple[list[str], dict[str, Any]]] = {}


def _plain(value: Any) -> bool:
    """None, a bool, number or string, or a tuple of them: what may go unchanged to every forward."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, tuple) and all(_plain(v) for v in value)


def _tensor_list(value: Any, what: str) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    if hasattr(value, "to_tuple"):  # transformers' ModelOutput
        return [v for v in value.to_tuple() if isinstance(v, torch.Tensor)]
    raise ContractError(f"{what} returned {type(value).__name__}: return a tensor or a tuple of tensors")


_WHOLE = -1  # CheckpointShard::kWhole: all of dim


def _shard_tuple(s: Any) -> tuple[str, str, int, int, int, int, tuple[int, ...]]:
    if isinstance(s, CheckpointShard):
        size = _WHOLE if s.size is None else int(s.size)
        return (s.checkpoint, s.live, int(s.dim), int(s.offset), size, int(s.index), tuple(int(d) for d in s.permute))
    if isinstance(s, dict):
        size = s.get("size")
        return (s["checkpoint"], s["live"], int(s.get("dim", 0)), int(s.get("offset", 0)),
                _WHOLE if size is None else int(size), int(s.get("index", -1)),
                tuple(int(d) for d in s.get("permute", ())))
    checkpoint, live, dim, offset, size, *rest = s
    index = int(rest[0]) if rest else -1
    permute = tuple(int(d) for d in rest[1]) if len(rest) > 1 else ()
    return (str(checkpoint), str(live), int(dim), int(offset), _WHOLE if size is None else int(size), index, permute)


def _from_stacked(model: torch.nn.Module, stacked: Iterable[tuple[str, str, Any]]) -> list[tuple[str, str, int, int, int, int, tuple[int, ...]]]:
    """vLLM's ``stacked_params_mapping`` ``(param_name, shard_name, shard_id)`` tuples, e.g.
    ``(".qkv_proj", ".q_proj", "q")``: every live parameter whose name holds ``param_name`` is
    split along dim 0 into its shards, in the order the mapping lists them. The rows of each shard
    come from a ``shard_sizes`` dict on the parameter ({shard_id: rows}), else from its layer's
    ``output_sizes`` (vLLM's merged linears, in mapping order), else equal parts, which only
    integer shard ids (``gate_up_proj``'s 0 and 1) may use: q/k/v sizes differ under GQA."""
    groups: dict[str, list[tuple[str, Any]]] = {}
    for param_name, shard_name, shard_id in stacked:
        groups.setdefault(param_name, []).append((shard_name, shard_id))
    out = []
    modules = dict(model.named_modules())
    for live, param in model.named_parameters():
        for param_name, shards in groups.items():
            if param_name not in live:
                continue
            sizes = getattr(param, "shard_sizes", None)
            layer_sizes = getattr(modules.get(live.rpartition(".")[0]), "output_sizes", None)
            if sizes is None and layer_sizes is not None and len(layer_sizes) == len(shards):
                sizes = {shard_id: n for (_, shard_id), n in zip(shards, layer_sizes)}
            if sizes is None and not all(isinstance(i, int) for _, i in shards):
                raise ContractError(
                    f"stacked_params_mapping splits '{live}' into {[n for n, _ in shards]}, whose row "
                    "counts graphcheck cannot tell: set param.shard_sizes = {shard_id: rows} (or the "
                    "layer's output_sizes), or return checkpoint_mapping() instead")
            offset = 0
            for shard_name, shard_id in shards:
                size = int(sizes[shard_id]) if sizes else param.shape[0] // len(shards)
                out.append((live.replace(param_name, shard_name, 1), live, 0, offset, size, -1, ()))
                offset += size
    return out


def _plain_tensors(prefix: str, value: Any, depth: int, visited: set[int]) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors held by ``value``: itself, or inside lists, tuples, dicts, partials and closures."""
    if depth > 4 or id(value) in visited:
        return
    if isinstance(value, torch.Tensor):
        yield prefix, value
        return
    if isinstance(value, torch.nn.Module):
        return  # a submodule: walked as a module of its own
    visited.add(id(value))
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _plain_tensors(f"{prefix}.{i}", v, depth + 1, visited)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _plain_tensors(f"{prefix}.{k}", v, depth + 1, visited)
    elif isinstance(value, functools.partial):
        for i, v in enumerate(value.args):
            yield from _plain_tensors(f"{prefix}.args.{i}", v, depth + 1, visited)
        for k, v in value.keywords.items():
            yield from _plain_tensors(f"{prefix}.{k}", v, depth + 1, visited)
        yield from _plain_tensors(prefix, value.func, depth + 1, visited)
    elif isinstance(value, types.MethodType):
        yield from _plain_tensors(prefix, value.__func__, depth + 1, visited)
    elif isinstance(value, types.FunctionType) and value.__closure__:
        for var, cell in zip(value.__code__.co_freevars, value.__closure__):
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            yield from _plain_tensors(f"{prefix}.<closure>.{var}", content, depth + 1, visited)
