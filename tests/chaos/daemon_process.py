"""The daemon's real entry point (``detector.daemon.main_run``) in a subprocess, on the
simulator's clock: ``python -m chaos.daemon_process CONFIG START ORIGIN SPEED [CLOCK_FILE]``
(tests/ on sys.path) ticks at ``START + (time.time() - ORIGIN) * SPEED`` (wall time), or with
CLOCK_FILE at ``START + clock * SPEED`` on that ``SharedStepClock``, which it moves one scrape
interval after each of its ticks (the cluster serves on the same clock: a loaded machine slows
the run down, it does not change what the daemon sees).

``DaemonProcess`` is the parent's handle: start, ``kill -9``, terminate, and the captured
log (stderr, JSON lines) of every run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent


@dataclass
class DaemonProcess:
    """One daemon subprocess at a time; ``logs`` keeps the stderr of every run."""

    config: Path
    start_time: float
    origin: float
    speed: float
    log_dir: Path
    clock_file: Path | None = None  # a SharedStepClock's file, else wall time
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0
    log_paths: list[Path] = field(default_factory=list)

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.runs += 1
        path = self.log_dir / f"daemon-{self.runs}.log"
        self.log_paths.append(path)
        env = dict(os.environ, PYTHONPATH=f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        args = [str(self.config), repr(self.start_time), repr(self.origin), repr(self.speed)]
        args += [str(self.clock_file)] if self.clock_file is not None else []
        with path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "chaos.daemon_process", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
            )

    def kill9(self) -> None:
        """SIGKILL: no shutdown code runs (no flush, no final save)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM (graceful) and wait; SIGKILL if it does not end. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON log line of every run, in order (other lines are skipped)."""
        out: list[dict[str, Any]] = []
        for path in self.log_paths:
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        continue
        return out

    def raw_logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.log_paths)


def _main(argv: list[str]) -> int:
    from step_clock import SharedStepClock

    from detector.service.daemon import main_run

    config, start, origin, speed = Path(argv[0]), *map(float, argv[1:4])
    if len(argv) < 5:
        return main_run(config, clock=lambda: start + (time.time() - origin) * speed)
    shared = SharedStepClock(Path(argv[4]))
    return main_run(
        config,
        clock=shared.scaled(start, speed),
        on_tick=lambda daemon, _: shared.advance(daemon.config.scrape.interval_s),
    )


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
