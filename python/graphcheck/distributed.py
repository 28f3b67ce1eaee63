"""Distributed scenarios on ``torch.distributed`` (DESIGN §2.9; Note [Distributed scenarios] in
``harness/src/engine/distributed.cpp``).

A scenario with ``distributed: {world_size: N, ...}`` runs N processes. The trainer rank streams
every refit over the process group with vLLM's weight-transfer protocol:

* ``start_weight_update``: the names, dtypes and shapes of the refit, and whether they come in the
  checkpoint format (``is_checkpoint_format``);
* ``update_weights``: one broadcast per tensor, or packed buckets of ``bucket_bytes``;
* ``finish_weight_update``: the manifest, each tensor's fingerprint and bucket, which every rank
  checks against what arrived (probe ``transfer``).

The rollout ranks run the whole lifecycle on their tensor-parallel shards (their models get
``tp_rank`` and ``tp_size``), and their records are merged into one, with the cross-rank checks
(probe ``ranks``).

How the two ends pack and name what they send is the RL framework's code: a model module may
define ``weight_sync()`` returning a :class:`WeightSync` of its own (the default is graphcheck's).

Launch: ``python -m graphcheck run`` launches the ranks itself (``env://`` on 127.0.0.1, a free
port); under ``torchrun`` each process runs its own rank and rank 0 writes the reports.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist

from . import _C

__all__ = ["WeightSync", "Transport", "run_scenario", "rank_main", "under_torchrun", "torchrun_main"]


def _round_up(value: int, multiple: int) -> int:
    return value if multiple <= 1 else (value + multiple - 1) // multiple * multiple


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.rsplit(".", 1)[-1], None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in a weight-transfer header")
    return dtype


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


class WeightSync:
    """Both ends of the weight transfer: how the trainer packs what it sends, and how a rollout
    rank unpacks it. Subclass it (and return it from a module-level ``weight_sync()`` beside the
    model's factory) to check an RL framework's own packing.

    ``checkpoint_format``: the ``is_checkpoint_format`` the trainer announces. ``align``: packed
    buckets place each tensor at a multiple of this many bytes."""

    checkpoint_format = True
    align = 16

    def alignment(self, side: str) -> int:
        """The alignment ``side`` ("producer" or "consumer") packs with."""
        return self.align

    def plan(self, metas: Sequence[tuple[str, int]], bucket_bytes: int, side: str) -> list[list[tuple[str, int, int]]]:
        """Buckets of ``(name, offset, nbytes)``, in the stream's order: a tensor starts a new
        bucket when it would not fit (a tensor larger than a bucket has one of its own)."""
        align = self.alignment(side)
        buckets: list[list[tuple[str, int, int]]] = []
        current: list[tuple[str, int, int]] = []
        end = 0
        for name, nbytes in metas:
            start = _round_up(end, align)
            if current and start + nbytes > bucket_bytes:
                buckets.append(current)
                current, start = [], 0
            current.append((name, start, nbytes))
            end = start + nbytes
        if current:
            buckets.append(current)
        return buckets

    def pack(self, tensors: dict[str, torch.Tensor], bucket: Sequence[tuple[str, int, int]]) -> torch.Tensor:
        size = max((offset + nbytes for _, offset, nbytes in bucket), default=0)
        buffer = torch.zeros(size, dtype=torch.uint8)
        for name, offset, nbytes in bucket:
            buffer[offset:offset + nbytes] = _as_bytes(tensors[name])
        return buffer

    def unpack(self, buffer: torch.Tensor, bucket: Sequence[tuple[str, int, int]],
               metas: dict[str, tuple[torch.dtype, list[int]]]) -> list[tuple[str, torch.Tensor]]:
        out = []
        for name, offset, nbytes in bucket:
            dtype, shape = metas[name]
            raw = torch.zeros(nbytes, dtype=torch.uint8)
            got = buffer[offset:offset + nbytes]  # short when the two ends' layouts disagree
            raw[:got.numel()] = got
            out.append((name, raw.view(dtype).reshape(shape).clone()))
        return out


def weight_sync_for(fixture: str) -> WeightSync:
    """The model module's ``weight_sync()`` when it has one, else graphcheck's."""
    if fixture.startswith("python:"):
        from . import _front
        factory = _front.resolve(fixture[len("python:"):])
        module = sys.modules.get(getattr(factory, "__module__", ""), None)
        make = getattr(module, "weight_sync", None) if module else None
        if callable(make):
            sync = make()
            if not isinstance(sync, WeightSync):
                raise TypeError(f"{module.__name__}.weight_sync() returned {type(sync).__name__}: return a "
                                "graphcheck.distributed.WeightSync")
            return sync
    return WeightSync()


class Transport:
    """The weight-transfer protocol over the default process group, for one rank: the trainer
    sends (and, colocated, streams to its own lifecycle too), every other rank receives. Each refit
    is one start / update / finish sequence of collectives, in cycle order on every rank."""

    def __init__(self, info: dict[str, Any], rank: int, sync: WeightSync, work_dir: str,
                 mutations: Sequence[str]) -> None:
        self.info = info
        self.spec = info["distributed"]
        self.rank = rank
        self.trainer = int(self.spec["trainer"])
        self.sync = sync
        self.work_dir = work_dir
        self.mutations = list(mutations)
        self.cycles = info["cycles"]
        # NCCL moves device tensors only: the collectives' buffers live on this rank's GPU.
        self.device = (torch.device("cuda", torch.cuda.current_device())
                       if dist.is_initialized() and dist.get_backend() == "nccl" else torch.device("cpu"))
        self._open: dict[str, Any] | None = None  # the refit whose collectives are under way
        self._done: set[int] = set()
        self._manifests: dict[int, list[tuple[str, int, str]]] = {}

    @property
    def sending(self) -> bool:
        return self.rank == self.trainer

    # -- the engine's side (RefitTransport) --------------------------------------------------
    def receive(self, cycle: int):
        self._finish_open()
        header = self._start(cycle)
        stream = self._update(cycle, header)
        self._open = {"cycle": cycle, "stream": stream, "header": header}
        packed = header["transfer"] == "packed"
        source = (f"refit cycle {cycle} from trainer rank {self.trainer} ({header['transfer']}"
                  + (f", {header['buckets']} buckets" if packed else "") + ")")
        return stream, list(header["names"]), source, bool(header["checkpoint_format"])

    def manifest(self, cycle: int) -> list[tuple[str, int, str]]:
        if self._open and self._open["cycle"] == cycle:
            self._finish_open()
        return self._manifests.get(cycle, [])

    def drain_from(self, cycle: int) -> None:
        self._finish_open()
        for c in range(cycle, len(self.cycles) + 1):
            if c not in self._done:
                self.receive(c)
                self._finish_open()

    def serve(self) -> None:
        """A trainer that runs no lifecycle: sends every refit in turn."""
        self.drain_from(1)

    # -- the protocol ------------------------------------------------------------------------
    def _truth(self, cycle: int) -> list[tuple[str, torch.Tensor]]:
        seed, prefixes = self.cycles[cycle - 1]
        path = _C.synthesize_full_checkpoint(self.info["file"], self.work_dir, int(seed), self.mutations)
        return _C.read_checkpoint(path, list(prefixes))

    def _broadcast_object(self, obj: Any) -> Any:
        box = [obj if self.sending else None]
        dist.broadcast_object_list(box, src=self.trainer)
        return box[0]

    def _start(self, cycle: int) -> dict[str, Any]:
        header = None
        if self.sending:
            tensors = self._truth(cycle)
            self._sending_tensors = tensors
            header = {
                "cycle": cycle,
                "names": [n for n, _ in tensors],
                "dtypes": [str(t.dtype) for _, t in tensors],
                "shapes": [list(t.shape) for _, t in tensors],
                "checkpoint_format": bool(self.sync.checkpoint_format),
                "transfer": self.spec["transfer"],
                "bucket_bytes": int(self.spec["bucket_bytes"]),
            }
            if header["transfer"] == "packed":
                metas = [(n, t.numel() * t.element_size()) for n, t in tensors]
                self._plan = self.sync.plan(metas, header["bucket_bytes"], "producer")
                header["buckets"] = len(self._plan)
        header = self._broadcast_object(header)
        if header["cycle"] != cycle:
            raise RuntimeError(f"the trainer announced refit cycle {header['cycle']} where this rank expected "
                               f"cycle {cycle}: the ranks' lifecycles are out of step")
        return header

    def _update(self, cycle: int, header: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
        sent: list[tuple[str, int, str]] = []
        if header["transfer"] == "per_tensor":
            for i, name in enumerate(header["names"]):
                if self.sending:
                    tensor = self._sending_tensors[i][1].contiguous()
                    sent.append((name, _C.fingerprint(tensor), ""))
                    tensor = tensor.to(self.device)
                else:
                    tensor = torch.empty(header["shapes"][i], dtype=_dtype(header["dtypes"][i]), device=self.device)
                dist.broadcast(tensor, src=self.trainer)
                yield name, tensor.cpu().clone() if self.device.type == "cpu" else tensor.clone()
        else:
            count = int(header["buckets"])
            metas = {n: (_dtype(d), s) for n, d, s in zip(header["names"], header["dtypes"], header["shapes"])}
            if self.sending:
                by_name = dict(self._sending_tensors)
                plan = self._plan
            else:
                sizes = [(n, _dtype(d).itemsize * _numel(s)) for n, d, s in
                         zip(header["names"], header["dtypes"], header["shapes"])]
                plan = self.sync.plan(sizes, header["bucket_bytes"], "consumer")
            for b in range(count):
                label = f"bucket {b + 1} of {count}"
                if self.sending:
                    buffer = self.sync.pack(by_name, plan[b]).to(self.device)
                    size = torch.tensor([buffer.numel()], dtype=torch.int64, device=self.device)
                else:
                    size = torch.zeros(1, dtype=torch.int64, device=self.device)
                dist.broadcast(size, src=self.trainer)
                if not self.sending:
                    buffer = torch.empty(int(size.item()), dtype=torch.uint8, device=self.device)
                dist.broadcast(buffer, src=self.trainer)
                buffer = buffer.cpu()
                if self.sending:
                    for name, _, _ in plan[b]:
                        sent.append((name, _C.fingerprint(by_name[name]), label))
                        yield name, by_name[name].clone()
                elif b < len(plan):
                    # This rank's own layout of the bucket (Note: it may disagree with the trainer's).
                    yield from self.sync.unpack(buffer, plan[b], metas)
            if not self.sending:
                # Tensors this rank's layout puts past the trainer's last bucket never arrive.
                for bucket in plan[count:]:
                    for name, _, nbytes in bucket:
                        dtype, shape = metas[name]
                        yield name, torch.zeros(nbytes, dtype=torch.uint8).view(dtype).reshape(shape)
        manifest = self._broadcast_object(sent if self.sending else None)
        self._manifests[cycle] = [(str(n), int(fp), str(b)) for n, fp, b in manifest]
        self._done.add(cycle)

    def _finish_open(self) -> None:
        if self._open is None:
            return
        stream = self._open["stream"]
        self._open = None
        for _ in stream:  # the rest of its collectives, whatever the consumer read
            pass


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


# -- one rank ---------------------------------------------------------------------------------

def _init_process_group(spec: dict[str, Any], rank: int, world_size: int, backend: str) -> None:
    pg_backend = spec["backend"] or ("nccl" if backend == "cuda" else "gloo")
    if pg_backend == "nccl":
        # One GPU per rank: torchrun's LOCAL_RANK, else the rank on this node.
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % max(1, torch.cuda.device_count()))
    dist.init_process_group(pg_backend, init_method="env://", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=float(spec["timeout"])))


def run_rank(file: str, rank: int, world_size: int, *, backend: str, seed: int | None,
             mutations: Sequence[str], work_dir: str) -> dict[str, Any]:
    """Runs rank `rank` of a distributed scenario in this process (its process group already made
    or made here from the env:// variables); returns what the merge needs of it."""
    info = _C.scenario_info(file, seed)
    spec = info["distributed"]
    if spec is None:
        raise ValueError(f"{file}: the scenario has no 'distributed:' block")
    if world_size != spec["world_size"]:
        raise ValueError(f"{file}: the scenario runs world_size {spec['world_size']} processes, this launch has "
                         f"{world_size}: launch it with --nproc-per-node {spec['world_size']} (torchrun) or let "
                         "python -m graphcheck launch it")
    made = False
    if not dist.is_initialized():
        _init_process_group(spec, rank, world_size, backend)
        made = True
    rollout = list(spec["rollout"])
    tp_rank = rollout.index(rank) if rank in rollout else -1
    out: dict[str, Any] = {"rank": rank, "tp_rank": tp_rank, "trainer": rank == spec["trainer"],
                           "record": None, "crash": None, "error": ""}
    rank_dir = os.path.join(work_dir, f"rank-{rank}")
    try:
        transport = Transport(info, rank, weight_sync_for(info["fixture"]), rank_dir, mutations)
        if tp_rank >= 0:
            out["record"] = _C.run_rank(file, rank, world_size, tp_rank, len(rollout), transport, backend, seed,
                                        list(mutations), rank_dir)
        else:
            _C.enable_mutations(list(mutations))
            transport.serve()
    except Exception as e:  # the trainer's own failure; a rollout rank's is in its record
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        if made:
            try:
                dist.destroy_process_group()
            except Exception:
                pass
    return out


def rank_main(argv: Sequence[str]) -> int:
    """``python -m graphcheck __rank FILE --rank R --world-size N --out PATH ...``: one rank, launched
    by :func:`run_scenario`; writes what it produced to PATH (JSON)."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m graphcheck __rank")
    parser.add_argument("file")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--mutation", action="append", default=[])
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(list(argv))
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    result = run_rank(args.file, args.rank, args.world_size, backend=args.backend, seed=args.seed,
                      mutations=args.mutation, work_dir=args.work_dir)
    tmp = args.out + ".tmp"
    Path(tmp).write_text(json.dumps(result))
    os.replace(tmp, args.out)
    return 0


# -- the launcher -----------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: str, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _signal_name(sig: int) -> str:
    try:
        return f"{signal.Signals(sig).name} ({signal.strsignal(sig)})"
    except ValueError:
        return f"signal {sig}"


def run_scenario(file: str, options: dict[str, Any]) -> str:
    """Launches the ranks of a distributed scenario (``env://`` on 127.0.0.1), waits for them, and
    returns their merged record (JSON). A rank that dies or hangs is reported as such and the
    others' results stay; the scenario's own timeout (the runner's) covers them all."""
    info = _C.scenario_info(file, options.get("seed"))
    spec = info["distributed"]
    world = int(spec["world_size"])
    # A folder of this launch's own: runs of one scenario may go at once (mutants -j N).
    launch_dir = os.path.join(options["work_dir"], info["name"], f"launch-{os.getpid()}")
    work_dir = launch_dir
    os.makedirs(work_dir, exist_ok=True)
    port = _free_port()
    children: list[dict[str, Any]] = []
    for rank in range(world):
        out = os.path.join(work_dir, f"rank-{rank}.json")
        log = os.path.join(work_dir, f"rank-{rank}.log")
        for stale in (out,):
            if os.path.exists(stale):
                os.remove(stale)
        cmd = [sys.executable, "-m", "graphcheck", "__rank", file, "--rank", str(rank), "--world-size", str(world),
               "--out", out, "--backend", options.get("backend", "auto"), "--work-dir", launch_dir,
               "--threads", str(int(options.get("threads", torch.get_num_threads())))]
        if options.get("seed") is not None:
            cmd += ["--seed", str(options["seed"])]
        for m in options.get("mutations", []):
            cmd += ["--mutation", m]
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                   GRAPHCHECK_RANK_CHILD="1", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        with open(log, "wb") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        children.append({"rank": rank, "proc": proc, "out": out, "log": log, "killed": None})
    # Once a rank has died, the others get the collective timeout and a margin to notice, then go.
    # A rank that hangs is killed before the scenario's own timeout (the runner's, which would take
    # every rank's record with it), so that the others' records stay.
    grace = float(spec["timeout"]) + 30.0
    # The run's timeout for this scenario (the runner's --timeout, else the scenario's, else 900 s).
    limit = 0.9 * (float(options.get("timeout") or 0) or float(info.get("timeout") or 0) or 900.0)
    started = time.monotonic()
    deadline = None
    while [c["proc"].poll() for c in children].count(None):  # every child polled, every time
        failed = [c for c in children if c["proc"].returncode not in (None, 0)]
        if failed and deadline is None:
            deadline = time.monotonic() + grace
        hung = time.monotonic() - started > limit
        if hung or (deadline is not None and time.monotonic() > deadline):
            for c in children:
                if c["proc"].poll() is None:
                    c["proc"].kill()
                    c["killed"] = "hung" if hung else failed[0]["rank"]
            for c in children:
                c["proc"].wait()
            break
        time.sleep(0.05)
    ranks = []
    for c in children:
        code = c["proc"].returncode
        entry: dict[str, Any]
        if code == 0 and os.path.exists(c["out"]):
            entry = json.loads(Path(c["out"]).read_text())
        else:
            rollout = list(spec["rollout"])
            entry = {"rank": c["rank"], "tp_rank": rollout.index(c["rank"]) if c["rank"] in rollout else -1,
                     "trainer": c["rank"] == spec["trainer"], "record": None, "error": ""}
            crash: dict[str, Any] = {"stderr_tail": _tail(c["log"]), "log": c["log"]}
            if c["killed"] == "hung":
                crash.update(cause="timeout", signal=_signal_name(signal.SIGKILL), timeout=limit)
            elif c["killed"] is not None:  # stopped after another rank died
                crash.update(cause="interrupted", signal=_signal_name(signal.SIGKILL), timeout=grace)
            elif code is not None and code < 0:
                crash.update(cause="signal", signal=_signal_name(-code))
            else:
                crash.update(cause="exit", exit_code=int(code or 0))
            entry["crash"] = crash
        ranks.append(entry)
    return _C.merge_ranks(file, ranks, list(options.get("mutations", [])))


# -- torchrun ----------------------------------------------------------------------------------

def under_torchrun() -> bool:
    """Whether this process was launched by torchrun (or another env:// launcher) as one rank."""
    return (os.environ.get("GRAPHCHECK_RANK_CHILD") != "1" and "RANK" in os.environ
            and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ)


def torchrun_main(args: Sequence[str]) -> int | None:
    """``torchrun --nproc-per-node N -m graphcheck run SCENARIO.yaml [--report-dir DIR] ...``: this
    process runs its own rank; rank 0 gathers the ranks' results, merges them and writes the
    reports; the other ranks write nothing and exit 0. Exit codes as ``graphcheck run``. None when
    the command line is not one distributed scenario file (the CLI then runs as usual)."""
    import argparse
    parser = argparse.ArgumentParser(prog="torchrun ... -m graphcheck run")
    parser.add_argument("file")
    parser.add_argument("--report-dir", default="reports/out")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--mutation", action="append", default=[])
    parser.add_argument("--threads", type=int, default=1)
    try:
        parsed, rest = parser.parse_known_args(list(args))
    except SystemExit:
        return None
    if not os.path.isfile(parsed.file):
        return None
    try:
        info = _C.scenario_info(parsed.file, parsed.seed)
    except Exception:
        return None  # the CLI says what is wrong with it
    if info["distributed"] is None:
        return None
    if rest:
        print(f"graphcheck (torchrun): options a rank does not take: {' '.join(rest)} (a rank takes --report-dir, "
              "--backend, --seed, --mutation, --threads)", file=sys.stderr)
        return 2
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if parsed.threads > 0:
        torch.set_num_threads(parsed.threads)
    work_dir = os.path.join(parsed.report_dir, "work", info["name"])
    _init_process_group(info["distributed"], rank, world, parsed.backend)
    try:
        result = run_rank(parsed.file, rank, world, backend=parsed.backend, seed=parsed.seed,
                          mutations=parsed.mutation, work_dir=work_dir)
        gathered: list[Any] = [None] * world if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return 0
    record = _C.merge_ranks(parsed.file, gathered, parsed.mutation)
    return _C.write_reports([record], parsed.report_dir, "graphcheck",
                            {"backend": parsed.backend, "seed": parsed.seed, "threads": parsed.threads})
