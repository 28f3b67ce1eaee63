"""How the engine finds Python models: ``model: {python: "pkg.module:factory"}`` or
``model: {python: "path/to/file.py:factory"}`` (a path relative to the scenario file).

The factory is called with the scenario's ``config`` as keyword arguments and returns the model
(a ``torch.nn.Module`` that implements the contract in ``graphcheck._model``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from typing import Any, Callable

from ._model import ContractError, ModelAdapter

# Factories registered by graphcheck.check(), by token: "graphcheck._front:registered.<token>".
registered: dict[str, Callable[..., Any]] = {}


def format_exception(exc_type, value, tb) -> str:
    return "".join(traceback.format_exception(exc_type, value, tb)).rstrip()


def _load_module(module: str):
    if module.endswith(".py"):
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no such model file '{path}'")
        name = "graphcheck_models." + os.path.splitext(os.path.basename(path))[0] + f"_{abs(hash(path)):x}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        # The file imports its sibling modules as a script would (`from helpers import x`).
        folder = os.path.dirname(path)
        added = folder not in sys.path
        if added:
            sys.path.insert(0, folder)
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            if added:
                sys.path.remove(folder)
            raise
        return mod
    return importlib.import_module(module)


def resolve(spec: str) -> Callable[..., Any]:
    module, _, attr = spec.rpartition(":")
    if module == "graphcheck._front" and attr.startswith("registered."):
        token = attr[len("registered."):]
        if token not in registered:
            raise LookupError(f"no factory registered as '{token}' in this process")
        return registered[token]
    mod = _load_module(module)
    target: Any = mod
    for part in attr.split("."):
        if not hasattr(target, part):
            raise AttributeError(f"'{module}' has no attribute '{attr}'")
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"'{spec}' is a {type(target).__name__}, not a callable that makes the model")
    return target


def prepare(spec: str) -> str:
    """Imports the model's module (which registers its mutations); '' or what went wrong."""
    try:
        resolve(spec)
    except Exception as e:  # shown as a scenario error at the `python:` key
        where = "".join(traceback.format_exception_only(type(e), e)).strip()
        return (f"cannot load Python model '{spec}': {where}: check the module path and the "
                "factory name, and that the module imports in this environment")
    return ""


def create(spec: str, config: dict[str, Any]) -> ModelAdapter:
    factory = resolve(spec)
    try:
        inspect.signature(factory).bind(**config)
    except TypeError as e:
        raise ContractError(f"the factory '{spec}' does not take the scenario's config "
                            f"{sorted(config)}: {e}: fix the config keys or the factory's parameters") from None
    except ValueError:  # no signature to check (a builtin): let the call say
        pass
    return ModelAdapter(factory(**config), spec)
