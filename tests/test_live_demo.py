"""docs/simulator.md's "See an alert reach Alertmanager in 5 minutes", run as written.

The section's first shell block (Alertmanager, ``detector simulate --serve --failure-at 2m:79
--speed 60``, ``detector run``) runs in bash in a scratch directory, with its three ports
swapped for free ones and ``detector`` meaning this checkout's package; then its second block,
``amtool alert query``, is repeated until the alert of the planted GPU's node is listed. The
real ``prometheus-alertmanager`` and ``amtool`` from Debian: missing, the test is skipped on a
developer machine and fails under CI (.ci/run installs them).

The deadline only bounds a hang: the fault comes 2 wall minutes after the serve starts and the
alert a scrape interval later; nothing here asserts how long it took (tests/test_abrupt_faults.py
does, on a step clock).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2e.procs import free_port, require_tool

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "simulator.md"
TITLE = "## See an alert reach Alertmanager in 5 minutes"
ALERT_DEADLINE_S = 600.0  # the fault at 2 min, its alert seconds later: a hang bound
PLAN = re.compile(r"^  (node-\d+) GPU (\d+): pcie failure, XID 79, ", re.M)


def walkthrough() -> tuple[str, str]:
    """The section's two ```sh blocks: starting everything, and the query."""
    text = DOC.read_text()
    start = text.index(TITLE)
    end = text.find("\n## ", start + len(TITLE))
    blocks = re.findall(r"^```sh\n(.*?)^```", text[start:end], flags=re.M | re.S)
    assert 2 == len(blocks), "the walkthrough should have two sh blocks"
    return blocks[0], blocks[1].strip()


def test_the_walkthrough_names_the_failure_and_the_query() -> None:
    """The section plants 2m:79 at --speed 60 and queries the Alertmanager it started."""
    setup, query = walkthrough()
    assert "--speed 60 --failure-at 2m:79" in setup
    assert "--web.listen-address=127.0.0.1:9093" in setup
    assert "amtool alert query --alertmanager.url=http://127.0.0.1:9093" == query


@pytest.mark.tools
@pytest.mark.slow
def test_the_walkthrough_brings_the_alert_to_alertmanager(tmp_path: Path) -> None:
    """Run as written, the walkthrough's Alertmanager lists GPUFailureSuspected for the node
    the plan names (and, when the alert names a GPU, the planted one), with its diagnosis'
    failure_class and action labels and its runbook_url."""
    require_tool("prometheus-alertmanager")
    amtool = require_tool("amtool")
    setup, query = walkthrough()
    ports: dict[str, str] = {}
    while len(set(ports.values())) < 3:
        ports = {old: str(free_port()) for old in ("9093", "9400", "9108")}
    for old, new in ports.items():
        setup, query = setup.replace(old, new), query.replace(old, new)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "detector"  # `detector` of the walkthrough: this checkout's package
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m detector "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "demo"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETECTOR_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    log = (tmp_path / "setup.log").open("wb")
    # Its own session: the background jobs the block starts share its process group, which is
    # stopped as one at the end.
    shell = subprocess.Popen(
        ["bash", "-euc", setup],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert 0 == shell.wait(timeout=180), logs(tmp_path, work)
        plan = PLAN.search((work / "sim.log").read_text())
        assert plan is not None, logs(tmp_path, work)
        node, gpu = plan[1], plan[2]
        argv = [amtool, *query.split()[1:], "-o", "extended"]
        deadline = time.monotonic() + ALERT_DEADLINE_S
        listed = ""
        while f'node="{node}"' not in listed:
            if time.monotonic() > deadline:
                pytest.fail(f"no alert for {node} after {ALERT_DEADLINE_S:g} s\n{listed}\n"
                            + logs(tmp_path, work))  # fmt: skip
            time.sleep(2.0)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            listed = done.stdout
        (line,) = [row for row in listed.splitlines() if f'node="{node}"' in row]
        assert 'alertname="GPUFailureSuspected"' in line
        gpus = re.findall(r'\bgpu="(\d+)"', line)
        assert gpus in ([], [gpu])  # no GPU label yet (issue 39, item 2) or the planted one
        # the diagnosis the loop decided when the alert started, and its runbook
        assert re.search(r'\bfailure_class="[a-z_]+"', line), line
        assert re.search(r'\baction="[A-Z_/]+"', line), line
        assert re.search(r'\brunbook_url="[^"]+/diagnosis\.md#[a-z_]+"', line), line
    finally:
        stop_group(shell.pid)
        log.close()


def stop_group(pgid: int, grace_s: float = 20.0) -> None:
    """SIGTERM the walkthrough's process group, SIGKILL whatever outlives ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def logs(tmp_path: Path, work: Path) -> str:
    """The setup's output and each process's log, for a failure message."""
    parts = []
    for path in [tmp_path / "setup.log", *sorted(work.glob("*.log"))]:
        text = path.read_text(errors="replace") if path.exists() else "<none>"
        parts.append(f"----- {path.name}\n{text[-4000:]}")
    return "\n".join(parts)
