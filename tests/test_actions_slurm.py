"""The Slurm executor against a real slurmctld (Debian's slurm-wlm), started by the test with
simulated nodes in a slurm.conf of its own: drain with a reason, then resume.

No slurmd runs: the nodes are declared IDLE and SlurmdTimeout=0 keeps the controller from
marking them DOWN, which is all ``scontrol update`` needs. Missing slurmctld: failed under CI
(.ci/run installs slurm-wlm and slurm-client), skipped elsewhere.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.procs import Proc, free_port, require_tool, wait_until

from detector.actions import ActionEngine, ActionRunner, Candidate, SlurmExecutor
from detector.config import ActionsConfig
from detector.errors import ActionError
from detector.model import XidEvent

pytestmark = pytest.mark.tools
T0 = 1_750_000_000.0


def _conf(tmp: Path, ctld_port: int, slurmd_port: int) -> Path:
    state = tmp / "state"
    state.mkdir()
    conf = tmp / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=detector-test",
                f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={slurmd_port}",
                "AuthType=auth/none",
                "CredType=cred/none",
                f"SlurmUser={getpass.getuser()}",
                f"StateSaveLocation={state}",
                f"SlurmctldPidFile={tmp / 'slurmctld.pid'}",
                "SelectType=select/linear",
                "SchedulerType=sched/builtin",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "MpiDefault=none",
                "MailProg=/bin/true",
                "SlurmdTimeout=0",
                "ReturnToService=2",
                "NodeName=gpu-[01-03] NodeAddr=127.0.0.1 CPUs=1 State=IDLE",
                "PartitionName=gpu Nodes=gpu-[01-03] Default=YES State=UP",
                "",
            ]
        )
    )
    return conf


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A running slurmctld: (its slurm.conf, the scontrol path)."""
    slurmctld = require_tool("slurmctld")
    scontrol = require_tool("scontrol")
    conf = _conf(tmp_path, free_port(), free_port())
    env = {**os.environ, "SLURM_CONF": str(conf)}
    proc = Proc("slurmctld", [slurmctld, "-D", "-i", "-f", str(conf)], tmp_path, env=env)
    try:

        def up() -> bool:
            ping = subprocess.run([scontrol, "ping"], env=env, capture_output=True, text=True)
            return "is UP" in ping.stdout

        wait_until(up, 30.0, "slurmctld to answer scontrol ping", [proc])
        yield conf, scontrol
    finally:
        proc.stop()


def _show(conf: Path, scontrol: str, node: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    proc = subprocess.run(
        [scontrol, "show", "node", node], env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout


async def test_drains_a_node_with_its_reason_and_resumes_it(slurm: tuple[Path, str]) -> None:
    """A confirmed failure drains the node with a reason naming class and alert; a person's
    release resumes it."""
    conf, scontrol = slurm
    config = ActionsConfig(
        enabled=True, dry_run=False, kind="slurm", slurm={"scontrol": scontrol, "conf": conf}
    )
    runner = ActionRunner(ActionEngine(config), SlurmExecutor(config))
    failure = Candidate.from_xid(XidEvent(time=T0, node="gpu-02", gpu="5", xid=79), "pcie")
    await runner.step(T0, [failure], n_nodes=3)
    shown = _show(conf, scontrol, "gpu-02")
    assert "State=IDLE+DRAIN" in shown
    expected = "Reason=gpu-failure-detector: pcie: failure XID 79 on GPU 5; alert xid79:gpu-02/5@"
    assert expected in shown
    assert "DRAIN" not in _show(conf, scontrol, "gpu-01")

    await runner.release("gpu-02", T0 + 600, by="alice")
    shown = _show(conf, scontrol, "gpu-02")
    assert "DRAIN" not in shown
    assert "Reason=" not in shown
    assert {("exclude", "done"): 1, ("release", "done"): 1} == dict(runner.engine.stats().decisions)


async def test_an_unknown_node_is_an_error_naming_it(slurm: tuple[Path, str]) -> None:
    """scontrol's refusal becomes an ActionError with the node and scontrol's message."""
    conf, scontrol = slurm
    config = ActionsConfig(kind="slurm", slurm={"scontrol": scontrol, "conf": conf})
    failure = Candidate.from_xid(XidEvent(time=T0, node="gpu-99", gpu=None, xid=79))
    engine = ActionEngine(config.model_copy(update={"enabled": True, "dry_run": False}))
    decision = engine.update(T0, [failure], n_nodes=3)[0]
    with pytest.raises(ActionError, match=r"slurm: node gpu-99: scontrol exited 1: .*"):
        await SlurmExecutor(config).apply(decision)
