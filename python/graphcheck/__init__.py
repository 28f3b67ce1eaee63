"""graphcheck for Python models.

Checks the weight lifecycle of a ``torch.nn.Module`` that runs under CUDA graphs (load →
process_weights_after_loading → capture → replay → refit → replay) with the same engine, probes
and reports as the C++ ``graphcheck`` CLI::

    python -m graphcheck run scenarios/python/          # the CLI: run, mutants, list, compare, inspect
    pytest scenarios/python/                             # scenario files as test items
    record = graphcheck.check(make_model, scenario={...})  # from a test of your own

Inside model code::

    graphcheck.hook(self, "finalize_weights")             # announce a lifecycle hook
    BUG = graphcheck.mutation("mine.rebind", "what the bug does")
    if graphcheck.enabled(BUG): ...pre-fix... else: ...fix...
"""

from __future__ import annotations

import torch  # the extension's tensor caster needs torch's Python types first

from . import _C
from ._check import CheckFailed, Record, check
from ._cli import main
from ._model import (CheckpointShard, ContractError, ExpectedHook, ModelAdapter, default_load_weights,
                     default_weight_loader, load_tensor, set_weight_attrs)

__all__ = [
    "CheckFailed", "CheckpointShard", "ContractError", "ExpectedHook", "ModelAdapter", "Record",
    "check", "default_load_weights", "default_weight_loader", "enabled", "hook", "load_tensor", "main",
    "mutation", "set_weight_attrs",
]


def _answer_capturing_in_recordings() -> None:
    """Note [Capturing, as model code asks]: model code that must not sync with the host under a
    CUDA graph capture asks torch whether the current stream is capturing (transformers'
    is_tracing(), vLLM's and SGLang's capture paths) and takes another path when it is. The
    emulated backend's recording of a forward is such a capture, so torch's answer is True there,
    on the recording thread, and torch's own everywhere else (a real capture on a GPU included)."""
    import torch.cuda.graphs as graphs

    original = graphs.is_current_stream_capturing
    if getattr(original, "__graphcheck__", False):
        return

    def is_current_stream_capturing() -> bool:
        return _C.capturing() or original()

    is_current_stream_capturing.__doc__ = original.__doc__
    is_current_stream_capturing.__graphcheck__ = True
    graphs.is_current_stream_capturing = is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = is_current_stream_capturing


_answer_capturing_in_recordings()


def hook(module: torch.nn.Module, name: str) -> None:
    """Announces that ``module`` ran lifecycle hook ``name`` (C++: ``GRAPHCHECK_HOOK``). The
    hooks probe resolves the module to its path ("layers.1") and checks the hooks the model
    declares in ``expected_hooks()``. Outside a graphcheck run it does nothing."""
    _C.hook(module, name)


def mutation(name: str, description: str) -> str:
    """Registers a mutation (a toggle that re-introduces one known bug) and returns its name.
    Call it at import time of the model's module; scenarios list it under ``mutations:``, and it
    can act on any Python model. Registering the same name twice with the same description is
    harmless (a module imported again); with another one it is an error."""
    _C.add_mutation(name, "python", description)
    return name


def enabled(name: str) -> bool:
    """True while the scenario running on this thread has mutation ``name`` enabled."""
    return _C.mutation_enabled(name)
