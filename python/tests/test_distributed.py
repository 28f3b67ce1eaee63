"""Distributed scenarios (issue 27) on Gloo, two and three processes on this machine: the clean
scenarios pass, each weight-sync mutation is caught naming the rank and the shard, a killed rank is
a crashed record naming it, and torchrun runs the same scenario."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import graphcheck

REPO = Path(__file__).resolve().parents[2]
TP2 = REPO / "scenarios" / "python" / "dist_tp2.yaml"
PACKED = REPO / "scenarios" / "python" / "dist_tp2_packed.yaml"


def run(scenario: Path, *mutations: str) -> graphcheck.Record:
    return graphcheck.check(None, scenario, mutations=list(mutations))


def findings(record: graphcheck.Record, probe: str) -> list[dict]:
    return [f for f in record.findings if f["probe"] == probe]


def test_clean_scenarios_pass_on_every_rank():
    for scenario in (TP2, PACKED):
        record = run(scenario)
        assert record.passed, record.explain()
        assert record.exit_code == 0


def test_wrong_rank_offset_is_named_by_rank_and_shard():
    record = run(TP2, "py.tp.wrong_rank_offset")
    diff = findings(record, "replay_diff")
    assert diff, record.explain()
    assert all(f["evidence"]["rank"] == "1" for f in diff), record.explain()  # rank 0's offset is right
    first = diff[0]
    assert first["message"].startswith("rank 1: ")
    assert ("layers.0.mlp.down_proj.weight (parameter, holding 'layers.0.mlp.down_proj.weight' (tensor-parallel "
            "rank 1's columns 32..63 of it)") in first["evidence"]["tensors_differing_from_b"], first
    assert record.causes[0]["summary"].startswith(
        "`layers.{0,1}.mlp.down_proj.weight` differs from a fresh load of the same weights (model B) on rank 1 ")


def test_packed_buckets_the_two_ends_lay_out_differently_are_named_by_tensor_and_bucket():
    record = run(PACKED, "py.tp.bucket_alignment")
    transfer = findings(record, "transfer")
    assert {f["evidence"]["rank"] for f in transfer} == {"1", "2"}, record.explain()
    first = transfer[0]
    assert "arrived with other bytes than the trainer sent in refit cycle 1 from trainer rank 0 (packed" in first["message"]
    # The first tensor after the 12-byte rope_scale in a bucket is the first one read from the
    # wrong offset: q_proj, in the first bucket.
    assert first["subject"] == "layers.0.attn.q_proj.weight", first
    assert first["evidence"]["buckets"].startswith("bucket 1 of"), first
    assert record.causes[0]["summary"].startswith("`layers.{0,1}.attn.q_proj.weight"), record.causes[0]
    assert "the two ends lay the packed buckets out differently" in record.causes[0]["summary"]


def test_a_rank_that_skips_pwal_is_a_cross_rank_finding_naming_it():
    record = run(TP2, "py.tp.last_rank_skips_pwal_on_refit")
    hooks = [f for f in findings(record, "ranks") if f["subject"] == "finalize_scales"]
    assert hooks, record.explain()
    assert "the ranks ran different hooks in refit cycle 1: rank 1 ran fewer: finalize_scales@layers.0" in hooks[0]["message"]
    assert findings(record, "hooks") and all(f["evidence"]["rank"] == "1" for f in findings(record, "hooks"))


def test_a_replicated_scale_from_the_local_shard_is_a_cross_rank_finding():
    record = run(TP2, "py.tp.local_scale")
    ranks = findings(record, "ranks")
    assert [f["subject"] for f in ranks] == ["layers.0.mlp.act_scale", "layers.1.mlp.act_scale"], record.explain()
    assert "is declared replicated (every rank holds all of it), but the ranks hold different bytes after the initial load" in ranks[0]["message"]
    assert not findings(record, "replay_diff"), record.explain()  # each rank's A and B agree: only the ranks' do not


def test_checkpoint_names_sent_as_kernel_format_are_named():
    record = run(TP2, "py.tp.kernel_format_names")
    transfer = findings(record, "transfer")
    assert transfer, record.explain()
    assert "came in the kernel format (is_checkpoint_format false)" in transfer[0]["message"]
    assert "layers.0.attn.q_proj.weight" in transfer[0]["evidence"]["unknown_names"]


KILLER = """
import os, signal, sys
sys.path.insert(0, {fixtures!r})
import tp_llama


class Killed(tp_llama.TpLlama):
    def process_weights_after_loading(self):
        super().process_weights_after_loading()
        if self.tp_rank == 1 and self._loads > 1:
            os.kill(os.getpid(), signal.SIGKILL)


def make(**config):
    return Killed(**config)
"""


def test_a_killed_rank_is_a_crashed_record_naming_it_and_the_others_results_stay(tmp_path):
    (tmp_path / "killer.py").write_text(KILLER.format(fixtures=str(REPO / "fixtures" / "python")))
    scenario = TP2.read_text().replace("../../fixtures/python/tp_llama.py:make", "killer.py:make")
    scenario = scenario.replace("timeout: 60}", "timeout: 10}")
    path = tmp_path / "killed.yaml"
    path.write_text(scenario)
    record = graphcheck.check(None, path)
    assert record.status == "crashed", record.explain()
    assert "rank 1 (tensor-parallel rank 1) died of SIGKILL" in record["reason"], record["reason"]
    assert record["crash"]["cause"] == "signal"
    # Rank 0 kept its record: its findings name it (it lost its peer mid-refit).
    assert any(f["evidence"].get("rank") == "0" for f in record.findings), record.explain()


HANGER = KILLER.replace("os.kill(os.getpid(), signal.SIGKILL)", "import time; time.sleep(3600)")


def test_a_hung_rank_is_killed_before_the_scenarios_timeout_and_named(tmp_path):
    (tmp_path / "hanger.py").write_text(HANGER.format(fixtures=str(REPO / "fixtures" / "python")))
    scenario = TP2.read_text().replace("../../fixtures/python/tp_llama.py:make", "hanger.py:make")
    scenario = scenario.replace("timeout: 60}", "timeout: 5}").replace("timeout: 600", "timeout: 15")
    path = tmp_path / "hung.yaml"
    path.write_text(scenario)
    record = graphcheck.check(None, path)
    assert record.status == "crashed", record.explain()
    assert "rank 1 (tensor-parallel rank 1) hung past 13.5 s and was killed" in record["reason"], record["reason"]
    assert any(f["evidence"].get("rank") == "0" for f in record.findings), record.explain()


def test_the_cpp_cli_leaves_a_distributed_scenario_to_python_m_graphcheck(tmp_path):
    """The C++ CLI cannot make process groups: a Python scenario named on its command line is
    refused with the command that runs it."""
    cli = REPO / "build" / "bin" / "graphcheck"
    if not cli.exists():
        pytest.skip("no build/bin/graphcheck in this tree")
    out = subprocess.run([str(cli), "run", str(TP2), "--report-dir", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "python -m graphcheck" in out.stdout + out.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="torchrun's rendezvous on loopback is tested on Linux")
def test_torchrun_runs_a_rank_per_process_and_rank_0_writes_the_reports(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "graphcheck", "run", str(TP2), "--report-dir", str(tmp_path),
                          "--mutation", "py.tp.local_scale"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stdout + out.stderr  # the mutation is caught
    doc = json.loads((tmp_path / "graphcheck.json").read_text())
    [scenario] = doc["scenarios"]
    assert scenario["name"] == "dist-tp2"
    assert any(f["probe"] == "ranks" for f in scenario["findings"])
    assert (tmp_path / "junit.xml").exists() and (tmp_path / "graphcheck.md").exists()
