"""pytest plugin: scenario files as test items.

Registered as the ``graphcheck`` entry point of the ``pytest11`` group when the package is
installed (``-p graphcheck.pytest_plugin`` otherwise). ``pytest scenarios/python/`` collects every
``*.yaml`` scenario file that names a Python model (``model: {python: ...}``) as one item per
scenario, plus one per declared mutation (``--graphcheck-mutants``). An item fails with the
findings and their evidence as its message.

Options: ``--graphcheck-backend`` (emulated), ``--graphcheck-mutants`` (also run the kill-matrix
rows: each declared mutation must be caught by the probes the scenario names).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

# `model: {python: ...}` (flow style) or `model:` with an indented `python:` key (block style).
_PYTHON_MODEL = re.compile(r"^model\s*:(.*\bpython\s*:|[^\S\n]*(#.*)?\n(([^\S\n]+.*|[^\S\n]*)\n)*?[^\S\n]+python\s*:)",
                           re.MULTILINE)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphcheck")
    group.addoption("--graphcheck-backend", default="emulated",
                    help="graph backend for scenario items: emulated (default), cuda or auto")
    group.addoption("--graphcheck-mutants", action="store_true", default=False,
                    help="also collect one item per declared mutation, which must be caught")


def pytest_collect_file(parent: pytest.Collector, file_path) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    try:
        text = file_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not _PYTHON_MODEL.search(text):
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


def _declared_mutations(text: str) -> list[str]:
    """The keys of the top-level ``mutations:`` mapping (block style), without a YAML library."""
    out, inside = [], False
    for line in text.splitlines():
        if re.match(r"^mutations\s*:", line):
            inside = True
            continue
        if inside:
            if line.strip() == "" or line.lstrip().startswith("#"):
                continue
            if not line.startswith((" ", "\t")):
                break
            m = re.match(r"^\s+([A-Za-z0-9_.\-]+)\s*:", line)
            if m:
                out.append(m.group(1))
    return out


class ScenarioFile(pytest.File):
    def collect(self):
        yield ScenarioItem.from_parent(self, name="clean", mutation=None)
        if self.config.getoption("--graphcheck-mutants"):
            for m in _declared_mutations(self.path.read_text(encoding="utf-8")):
                yield ScenarioItem.from_parent(self, name=f"mutant[{m}]", mutation=m)


class ScenarioFailure(Exception):
    pass


class ScenarioItem(pytest.Item):
    def __init__(self, *, mutation: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mutation = mutation

    def runtest(self) -> None:
        from ._check import check

        backend = self.config.getoption("--graphcheck-backend")
        record = check(None, str(self.path), backend=backend,
                       mutations=[self.mutation] if self.mutation else [])
        self.user_properties.append(("graphcheck_status", record.status))
        if self.mutation is None:
            if not record.passed:
                raise ScenarioFailure(record.explain())
            return
        verdicts = [v for v in record.verdicts if v.get("mutation") == self.mutation]
        if not verdicts:
            raise ScenarioFailure(f"no verdict on mutation {self.mutation}:\n{record.explain()}")
        v = verdicts[0]
        if not v.get("ok"):
            raise ScenarioFailure(f"mutation {self.mutation} was not caught as declared: expected "
                                  f"{v.get('expected')}, caught {v.get('caught')}, missed {v.get('missed')}:\n"
                                  f"{record.explain()}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ScenarioFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, 0, f"graphcheck scenario {self.path.name}" + (
            f" with {self.mutation}" if self.mutation else "")
