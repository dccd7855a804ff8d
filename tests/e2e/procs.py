"""Processes and waits for the end-to-end test, and the external tools the tool tests drive.

- ``require_tool(*names)`` / ``missing_tool(what)``: a binary the test needs (promtool,
  prometheus, chromium...); missing, the test fails under CI (``.ci/run`` installs them) and
  is skipped elsewhere. ``promtool_backfill(file, tsdb)`` runs promtool's OpenMetrics import.
- ``free_port()``: a loopback port that was free a moment ago (bound to port 0, then closed).
  Another process could take it before ours binds it; ``Proc.wait_http`` then reports the
  process's own error from its log.
- ``Proc``: one child process with stdout+stderr in a log file. ``stop()`` sends SIGTERM,
  then SIGKILL after a grace period, and always reaps the child, so nothing outlives the test.
- ``wait_until(probe, timeout_s, what, logs)``: poll ``probe`` until it returns something
  truthy and return that; on timeout fail with ``what``, the last probe error and the logs of
  the processes involved. Waits are deadlines, never fixed sleeps.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

import httpx
import pytest

T = TypeVar("T")


def missing_tool(what: str) -> NoReturn:
    """A tool the test drives is missing: fail under CI (``.ci/run`` installs it), else skip."""
    message = f"{what} not found (bash .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_tool(*names: str) -> str:
    """Path of the first of ``names`` (alternative names of one binary) on PATH; none:
    ``missing_tool``."""
    for name in names:
        path = shutil.which(name)
        if path is not None:
            return path
    missing_tool(" or ".join(names))


def promtool_backfill(openmetrics: Path, tsdb: Path) -> subprocess.CompletedProcess[str]:
    """``promtool tsdb create-blocks-from openmetrics`` of one file into ``tsdb`` (not
    checked: the caller asserts on the return code and output)."""
    return subprocess.run(
        [
            require_tool("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(openmetrics),
            str(tsdb),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Proc:
    """A child process started by the test; see the module docstring."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
            )

    def log(self, tail_chars: int = 6000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"<no log: {exc}>"
        return text[-tail_chars:]

    def describe(self) -> str:
        state = "running" if self.popen.poll() is None else f"exited {self.popen.returncode}"
        return f"----- {self.name} ({state}): {' '.join(self.argv)}\n{self.log()}"

    def stop(self, grace_s: float = 5.0) -> int:
        """SIGTERM, SIGKILL after ``grace_s``; reaps the child. Returns its exit code."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(grace_s)
        return self.popen.returncode


HANG_GUARD_FLOOR_S = 120.0


def wait_until(
    probe: Callable[[], T | None],
    timeout_s: float,
    what: str,
    procs: Iterable[Proc] = (),
    interval_s: float = 0.2,
) -> T:
    """Poll ``probe`` (exceptions count as "not yet") until truthy; fail with logs after
    ``timeout_s``, never less than ``HANG_GUARD_FLOOR_S``: the wait bounds a hang, it is not
    a timing assertion (a loaded machine runs the stack several times slower)."""
    procs = list(procs)
    timeout_s = max(HANG_GUARD_FLOOR_S, timeout_s)
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while True:
        for proc in procs:
            if proc.popen.poll() is not None:
                pytest.fail(f"{proc.name} exited while waiting for {what}\n{dump(procs)}")
        try:
            result = probe()
        except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
            result = None
            last_error = f"{type(exc).__name__}: {exc}"
        if result:
            return result
        if time.monotonic() >= deadline:
            pytest.fail(
                f"timed out after {timeout_s:g} s waiting for {what}"
                + (f" (last error: {last_error})" if last_error else "")
                + f"\n{dump(procs)}"
            )
        time.sleep(interval_s)


def wait_http(proc: Proc, url: str, timeout_s: float = 20.0) -> None:
    """Until ``url`` answers 200 (the process is up and listening)."""

    def probe() -> bool:
        return httpx.get(url, timeout=2.0).status_code == 200

    wait_until(probe, timeout_s, f"{proc.name} to answer {url}", [proc])


def dump(procs: Iterable[Proc]) -> str:
    return "\n".join(p.describe() for p in procs)


def stop_all(procs: Iterable[Proc]) -> None:
    """Stop every process, even if stopping one of them fails."""
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.stop()
