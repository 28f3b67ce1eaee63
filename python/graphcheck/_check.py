"""``graphcheck.check()``: one scenario on one model, from a test of your own."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

from . import _front
from ._cli import main


class CheckFailed(AssertionError):
    """A check found a bug. Its message lists every finding with its evidence."""

    def __init__(self, record: "Record") -> None:
        self.record = record
        super().__init__(record.explain())


class Record:
    """The JSON record of one scenario (the ``scenarios[0]`` of graphcheck.json) with the run's
    exit code: ``status``, ``findings`` (probe, phase, cycle, subject, message, evidence),
    ``verdicts`` (per mutation), ``measurements``."""

    def __init__(self, scenario: dict[str, Any], exit_code: int, report: dict[str, Any]) -> None:
        self.data = scenario
        self.exit_code = exit_code
        self.report = report

    @property
    def status(self) -> str:
        return self.data.get("status", "error")

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def findings(self) -> list[dict[str, Any]]:
        return self.data.get("findings", [])

    @property
    def causes(self) -> list[dict[str, Any]]:
        """The findings grouped by root cause, the most important first: ``summary``, ``primary``
        and ``findings`` (indices into :attr:`findings`), ``probes``, ``first_cycle``, ``repro``."""
        return self.data.get("causes", [])

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        return self.data.get("verdicts", [])

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def explain(self) -> str:
        lines = [f"graphcheck: scenario '{self.data.get('name')}' {self.status}"
                 + (f": {self.data['reason']}" if self.data.get("reason") else "")]
        causes = self.causes
        if causes:
            lines.append(f"  {len(causes)} cause{'' if len(causes) == 1 else 's'} "
                         f"({len(self.findings)} finding{'' if len(self.findings) == 1 else 's'}):")
            for k, c in enumerate(causes, 1):
                lines.append(f"  CAUSE {k}: {c.get('summary')}")
                first = c.get("first_cycle")
                seen = "at the initial load (cycle 0)" if first == 0 else f"in cycle {first}"
                lines.append(f"      first seen {seen}; rerun: {c.get('repro')}")
            lines.append("  every finding:")
        for f in self.findings:
            where = f"{f.get('pass', '')}/{f.get('phase', '')}"
            if f.get("cycle", -1) is not None and f.get("cycle", -1) >= 0:
                where += f" cycle {f['cycle']}"
            if f.get("batch_size", -1) not in (None, -1):
                where += f" bs {f['batch_size']}"
            lines.append(f"  [{f.get('probe')}] {where}: {f.get('subject')}: {f.get('message')}")
            for k, v in (f.get("evidence") or {}).items():
                lines.append(f"      {k}: {v}")
        for v in self.verdicts:
            lines.append(f"  mutation {v.get('mutation')}: {'caught' if v.get('ok') else 'NOT caught'} "
                         f"(expected {v.get('expected')}, caught by {sorted(v.get('caught') or {})})")
        return "\n".join(lines)

    def assert_passed(self) -> "Record":
        if not self.passed:
            raise CheckFailed(self)
        return self

    def __repr__(self) -> str:
        return f"<graphcheck.Record {self.data.get('name')!r} {self.status}, {len(self.findings)} findings>"


def _run(scenario_file: str, args: Iterable[str]) -> Record:
    with tempfile.TemporaryDirectory(prefix="graphcheck-") as out:
        report = os.path.join(out, "graphcheck.json")
        code = main(["run", scenario_file, "--no-isolate", "--report-dir", out, "--json", report,
                     "--junit", "-", "--markdown", "-", "--html", "-", "--trace", "-", *args])
        if code == 128 + signal.SIGINT:  # Ctrl-C stopped the run: stop the caller too
            raise KeyboardInterrupt
        if not os.path.exists(report):
            raise RuntimeError(f"graphcheck exited {code} and wrote no report for {scenario_file}")
        doc = json.loads(Path(report).read_text())
    scenarios = doc.get("scenarios") or []
    if not scenarios:
        raise RuntimeError(f"graphcheck exited {code}: no scenario ran from {scenario_file}")
    return Record(scenarios[0], code, doc)


def check(model: torch.nn.Module | Callable[..., torch.nn.Module] | str,
          scenario: str | os.PathLike | Mapping[str, Any] | None = None, *,
          mutations: Iterable[str] = (), backend: str = "emulated", seed: int | None = None,
          raise_on_failure: bool = False) -> Record:
    """Runs one scenario and returns its record.

    ``model``: a factory (called with the scenario's config), a model instance (used once), or a
    ``"pkg.module:factory"`` spec. ``scenario``: a scenario file, or its contents as a mapping
    without ``model`` (defaults: checkpoint load, batch sizes [1, 4], two refits, ``checks: all``).
    With ``raise_on_failure`` a failed check raises CheckFailed, whose message shows the findings.
    """
    args = [f"--backend={backend}"]
    for m in mutations:
        args += ["--mutation", m]
    if seed is not None:
        args += ["--seed", str(seed)]
    if isinstance(scenario, (str, os.PathLike)) and model is None:
        record = _run(os.fspath(scenario), args)
        return record.assert_passed() if raise_on_failure else record

    token = uuid.uuid4().hex
    if isinstance(model, str):
        # A model file is relative to where the caller is, not to the temporary scenario.
        module, sep, factory_name = model.rpartition(":")
        spec = f"{os.path.abspath(module)}{sep}{factory_name}" if module.endswith(".py") else model
    else:
        if isinstance(model, torch.nn.Module):
            instance = model
            used = []

            def factory(**_config):
                if used:
                    raise RuntimeError("graphcheck.check() was given one model instance, and the scenario "
                                       "builds more than one (model B, reruns): pass a factory instead")
                used.append(True)
                return instance
        else:
            factory = model
        _front.registered[token] = factory
        spec = f"graphcheck._front:registered.{token}"
    try:
        if isinstance(scenario, (str, os.PathLike)):
            raise TypeError("give either a scenario file (and model=None) or a model and a scenario mapping")
        doc: dict[str, Any] = {
            "scenario": "check-" + (getattr(model, "__name__", None) or type(model).__name__).lower().replace("_", "-"),
            "load": "checkpoint",
            "capture": {"batch_sizes": [1, 4]},
            "cycles": [{"refit": {"seed": 2}}, {"refit": {"seed": 3}}],
            "checks": "all",
        }
        doc.update(dict(scenario or {}))
        config = doc.pop("config", {})
        doc["model"] = {"python": spec, "config": config}
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="graphcheck-check-", delete=False) as f:
            json.dump(doc, f)  # JSON is YAML
            path = f.name
        try:
            record = _run(path, args)
        finally:
            os.unlink(path)
    finally:
        _front.registered.pop(token, None)
    return record.assert_passed() if raise_on_failure else record
