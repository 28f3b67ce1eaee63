"""``python -m graphcheck``: the graphcheck CLI in this interpreter, so that Python models (and the
mutations their modules register) are known to every subcommand. Same subcommands, options, exit
codes and reports as the C++ ``graphcheck`` binary; isolated scenarios re-execute this same
interpreter (``python -m graphcheck __scenario ...``)."""

from __future__ import annotations

import signal
import sys
from typing import Sequence

from . import _C


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # Distributed scenarios (graphcheck.distributed): one rank launched by the run itself, or a
    # process of torchrun's running its own rank of one scenario.
    if args[:1] == ["__rank"]:
        from .distributed import rank_main
        return rank_main(args[1:])
    if args[:1] == ["run"]:
        from . import distributed
        if distributed.under_torchrun():
            code = distributed.torchrun_main(args[1:])
            if code is not None:
                return code
    _C.set_child_command([sys.executable, "-m", "graphcheck"])
    # The engine installs its own SIGINT/SIGTERM handlers for the run (a stop keeps the reports);
    # Python's come back afterwards.
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = _C.cli_main(["python -m graphcheck", *args])
    finally:
        for s, handler in saved.items():
            if handler is not None:
                try:
                    signal.signal(s, handler)
                except ValueError:  # not the main thread: Python's handlers were never replaced there
                    pass
    sys.stdout.flush()
    return code
