"""Requests from people to the running detector: release a node, close the breaker.

``detector actions release NODE`` carries the release out in the scheduler itself, then
appends a line to this file so that the engine's state (in the daemon's state file, owned by
the running daemon) forgets the exclusion too: the tick loop calls ``drain`` each tick and
hands each request to ``ActionEngine.release`` / ``close_breaker``.

Format: JSONL beside the state file (``<state.path>.actions-inbox.jsonl``), one request a line:
``{"op": "release" | "close_breaker", "node": "...", "by": "...", "time": <unix s>}``.
``drain`` renames the file before reading it, so a request appended meanwhile lands in a new
file and is never lost nor read twice. A malformed line is an ``ActionError`` naming file and
line (the other lines are still returned by ``read``).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ..errors import ActionError
from ..loop import ActionRequest

__all__ = ["ActionRequest", "drain_inbox", "inbox_path", "post_request", "read_inbox"]


def inbox_path(state_path: Path) -> Path:
    return Path(state_path).with_name(Path(state_path).name + ".actions-inbox.jsonl")


def post_request(path: Path, request: ActionRequest) -> None:
    """Append one request (one write of one line: atomic for appenders on POSIX)."""
    line = json.dumps(
        {"op": request.op, "node": request.node, "by": request.by, "time": request.time}
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_inbox(path: Path) -> list[ActionRequest]:
    """The pending requests, oldest first; [] when there is no inbox."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            op = data["op"]
            if op not in ("release", "close_breaker"):
                raise ValueError(f"unknown op {op!r}")
            out.append(ActionRequest(op, str(data["node"]), str(data["by"]), float(data["time"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise ActionError(f"{path}:{number}: not an action request: {exc}") from exc
    return out


def drain_inbox(path: Path) -> list[ActionRequest]:
    """Take every pending request out of the inbox (see the module docstring)."""
    path = Path(path)
    taken = path.with_name(path.name + ".taken")
    try:
        os.replace(path, taken)
    except FileNotFoundError:
        return []
    try:
        return read_inbox(taken)
    finally:
        with contextlib.suppress(OSError):
            taken.unlink()
