"""The chaos cluster in its own process: ``python -m chaos.cluster_process '<json>'`` (with
tests/ on sys.path) starts the simulator and the chaos servers, prints one JSON line
``{"targets": [...], "plan": {...}, "start": <scenario start>, "origin": <wall time>}`` and
serves until its stdin closes (the parent died or is done) or SIGTERM. Its simulated clock runs
on wall time at ``speed``, or with the option ``clock_file`` on that ``SharedStepClock``
(tests/step_clock.py) at ``speed`` simulated seconds per clock second.

Why a process: the simulator builds every page in Python; in the daemon's process it would
compete with the daemon for the GIL and the tick statistics would measure the simulator.
``ClusterProcess`` is the parent's handle (a context manager that never leaves the child).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from step_clock import SharedStepClock

TESTS = Path(__file__).resolve().parent.parent


@dataclass
class ClusterProcess:
    """Start with ``ClusterProcess.start(**options)``; ``targets``/``plan`` as in harness."""

    proc: subprocess.Popen[str]
    targets: list[dict[str, Any]]
    plan: dict[str, str]
    start_time: float  # the scenario's start (simulated unix time)
    origin: float  # wall time the simulated clock started
    clock_file: Path | None = None  # the SharedStepClock it serves on, else wall time

    @classmethod
    def start(cls, clock_file: Path | None = None, **options: Any) -> ClusterProcess:
        """``options``: nodes, gpus, seed, speed, fraction, slow_s, with_bad, failures
        (list of FailureSpec fields as dicts); ``clock_file``: serve on that
        ``SharedStepClock`` instead of wall time."""
        if clock_file is not None:
            SharedStepClock(clock_file)  # created at 0 before either process reads it
            options["clock_file"] = str(clock_file)
        env = dict(os.environ, PYTHONPATH=f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        proc = subprocess.Popen(
            [sys.executable, "-m", "chaos.cluster_process", json.dumps(options)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            proc.wait(5)
            raise RuntimeError("chaos cluster process did not start")
        info = json.loads(line)
        return cls(proc, info["targets"], info["plan"], info["start"], info["origin"], clock_file)

    def sim_time(self, speed: float) -> float:
        if self.clock_file is not None:
            return self.start_time + SharedStepClock(self.clock_file)() * speed
        return self.start_time + (time.time() - self.origin) * speed

    @property
    def healthy(self) -> list[str]:
        nodes = dict.fromkeys(t["node"] for t in self.targets)
        return [n for n in nodes if n not in self.plan]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> ClusterProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _main(options: dict[str, Any]) -> None:
    from detector.sim import FailureSpec

    from .harness import chaos_cluster, quiet_scenario

    speed = float(options.pop("speed", 100.0))
    cluster_opts = {k: options.pop(k) for k in ("fraction", "slow_s", "with_bad") if k in options}
    failures = tuple(FailureSpec(**f) for f in options.pop("failures", ()))
    clock_file = options.pop("clock_file", None)
    clock = SharedStepClock(Path(clock_file)) if clock_file else time.monotonic
    scenario = quiet_scenario(**options, failures=failures)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with chaos_cluster(scenario, speed=speed, clock=clock, **cluster_opts) as cluster:
        origin = time.time() - (time.monotonic() - cluster.clock.origin)
        info = {
            "targets": cluster.targets,
            "plan": cluster.plan,
            "start": scenario.start,
            "origin": origin,
        }
        print(json.dumps(info), flush=True)
        threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
        done.wait()


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
