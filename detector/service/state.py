"""The daemon's state file: numpy arrays plus JSON metadata, written atomically.

Container (version ``FORMAT_VERSION``): an uncompressed ``.npz`` (a zip of ``.npy`` members,
loaded without pickle) whose member ``__meta__`` is the UTF-8 JSON of
``{"format": FORMAT_VERSION, "meta": <caller's meta>}``. The caller's meta holds one key per
part (the daemon writes ``loop``, ``delivery``, ``daemon``).

- ``save_state`` writes a temporary file in the target's directory, fsyncs it, renames it over
  the target (atomic on POSIX) and fsyncs the directory, so a crash leaves the old file or the
  new one, never half of one. Any OS failure (disk full, permission, missing directory) raises
  ``StateError`` naming the file; the temporary file is removed.
- ``load_state`` returns ``None`` for a missing file (first start) and, with a warning naming
  the file and the reason, for a truncated, corrupt or other-version one: the daemon then
  starts clean instead of crash-looping on a bad file. A path it can never use (a directory,
  a file it may not read) raises ``StateError``: ``detector run`` exits 2 naming it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import StateError
from ..logs import get_logger

__all__ = ["FORMAT_VERSION", "load_state", "save_state"]

FORMAT_VERSION = 1
_META = "__meta__"
_log = get_logger(component="state")


def save_state(path: Path, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
    """Atomically replace ``path`` with ``arrays`` and ``meta`` (JSON-able). Raises
    StateError when it cannot be written; the previous file is then left as it was."""
    path = Path(path)
    if _META in arrays:
        raise StateError(f"state file {path}: array name {_META!r} is reserved")
    for name, value in arrays.items():
        if np.asarray(value).dtype.hasobject:
            # Object arrays need pickle to load, which load_state refuses (untrusted bytes).
            raise StateError(f"state file {path}: array {name!r} has dtype object")
    try:
        blob = json.dumps({"format": FORMAT_VERSION, "meta": meta}, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise StateError(f"state file {path}: metadata is not JSON-able: {exc}") from exc
    members = {name: np.asarray(value) for name, value in arrays.items()}
    members[_META] = np.frombuffer(blob.encode(), dtype=np.uint8)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a StateDirectory may not exist yet
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, allow_pickle=False, **members)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(path.parent)
    except OSError as exc:
        raise StateError(f"cannot write state file {path}: {exc.strerror or exc}") from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def load_state(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """(arrays, meta) saved by ``save_state``, or None (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        _log.info("no state file, starting clean", path=str(path))
        return None
    if path.is_dir() or not os.access(path, os.R_OK):
        # not a damaged file (that is a clean start) but a path the daemon can never use
        why = "is a directory" if path.is_dir() else "is not readable"
        raise StateError(f"state.path {path}: {why}")
    problem = ""
    arrays: dict[str, np.ndarray] = {}
    header: Any = None
    try:
        # Our own handle: np.load leaks the one it opens when the zip directory is damaged.
        with path.open("rb") as fh, np.load(fh, allow_pickle=False) as npz:
            if _META not in npz.files:
                problem = "no metadata member (not a detector state file)"
            else:
                arrays = {name: npz[name] for name in npz.files if name != _META}
                header = json.loads(npz[_META].tobytes().decode())
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
        problem = f"{type(exc).__name__}: {exc}"
    if not problem and not (isinstance(header, dict) and header.get("format") == FORMAT_VERSION):
        found = header.get("format") if isinstance(header, dict) else None
        problem = f"format version {found!r}, this build reads {FORMAT_VERSION}"
    if not problem and not isinstance(header.get("meta"), dict):
        problem = "metadata is not an object"
    if problem:
        _log.warning("state file unusable, starting clean", path=str(path), reason=problem)
        return None
    return arrays, header["meta"]


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (a crash right after could otherwise undo it)."""
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
