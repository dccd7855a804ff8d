"""The job-attempts file (``detector replay --jobs FILE``): one attempt of a job to run, a line.

JSONL, written by a scheduler export or by ``detector simulate --jobs FILE``::

    {"job": "pretrain-a/s3", "attempt": 2, "start": <unix seconds or RFC3339>,
     "end": <same, or null while running>, "exit_status": 1 | 0 | null,
     "nodes": ["gpu-node-07", ...], "automatic": true}

- ``job`` (or ``session``): the id that ties the attempts of one job together: attempt 1 is its
  submission, every later attempt a restart of it;
- ``attempt``: a positive integer, unique per job;
- ``start``/``end``: as in the events file (events.py): unix seconds, a numeric string, or
  RFC 3339 with an offset; ``end`` null or absent while the attempt still runs, never before
  ``start``;
- ``exit_status``: an integer (0: the attempt succeeded, anything else: it failed), or null or
  absent while it still runs (then ``end`` must be null too);
- ``nodes``: a non-empty list of node names;
- ``automatic``: true when this attempt was a restart the scheduler (a retry policy) made by
  itself, false for a person's resubmission; absent means false. Attempt 1 is the submission.

Blank lines and ``#`` comments are skipped; other fields are ignored. The first bad line raises
:class:`~detector.errors.JobsError` naming file, line and field. Attempts come back sorted by
job, then attempt. ``.gz`` files are read and written transparently.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import JobsError
from ..model import JobAttempt
from .events import FieldError, json_record, open_text, parse_time


def _parse_job(record: dict[str, Any]) -> str:
    key = "job" if "job" in record else "session" if "session" in record else None
    if key is None:
        raise FieldError("job", "missing (give the job or session id as 'job' or 'session')")
    value = record[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise FieldError(key, f"expected a non-empty string, got {value!r}")
    return value.strip()


def _parse_attempt(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise FieldError("attempt", f"expected a positive integer, got {value!r}")


def _parse_exit(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise FieldError("exit_status", f"expected an integer exit status or null, got {value!r}")


def _parse_nodes(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise FieldError("nodes", f"expected a non-empty list of node names, got {value!r}")
    for node in value:
        if not isinstance(node, str) or not node.strip():
            raise FieldError("nodes", f"expected node names (non-empty strings), got {node!r}")
    return tuple(node.strip() for node in value)


def _parse_record(record: Any) -> JobAttempt:
    record = json_record(record, ("attempt", "start", "nodes"))
    job = _parse_job(record)
    start = parse_time("start", record["start"])
    end_raw = record.get("end")
    end = None if end_raw is None else parse_time("end", end_raw)
    if end is not None and end < start:
        raise FieldError("end", f"end {end_raw!r} is before start {record['start']!r}")
    exit_status = _parse_exit(record.get("exit_status"))
    if exit_status is None and end is not None:
        raise FieldError("exit_status", "missing for an attempt that ended (end is set)")
    if exit_status is not None and end is None:
        raise FieldError("end", f"missing for an attempt that exited (exit_status {exit_status})")
    automatic = record.get("automatic", False)
    if not isinstance(automatic, bool):
        raise FieldError("automatic", f"expected true or false, got {automatic!r}")
    return JobAttempt(
        job=job,
        attempt=_parse_attempt(record["attempt"]),
        start=start,
        end=end,
        exit_status=exit_status,
        nodes=_parse_nodes(record["nodes"]),
        automatic=automatic,
    )


def parse_jobs(lines: Iterable[str], source: str) -> list[JobAttempt]:
    """Parse JSONL lines (module docstring); ``source`` names the input in errors."""
    attempts: list[JobAttempt] = []
    seen: dict[tuple[str, int], int] = {}
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise JobsError(f"{source}:{number}: not valid JSON: {reason}") from None
        try:
            attempt = _parse_record(record)
        except FieldError as exc:
            raise JobsError(f"{source}:{number}: {exc}") from None
        key = (attempt.job, attempt.attempt)
        if key in seen:
            raise JobsError(
                f"{source}:{number}: field 'attempt': attempt {attempt.attempt} of job "
                f"{attempt.job!r} is already on line {seen[key]}"
            )
        seen[key] = number
        attempts.append(attempt)
    attempts.sort(key=lambda a: (a.job, a.attempt))
    return attempts


def load_jobs(path: Path) -> list[JobAttempt]:
    """Read a job-attempts file (``.gz`` allowed); raise JobsError naming file, line, field."""
    try:
        with open_text(path, write=False) as handle:
            return parse_jobs(handle, str(path))
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise JobsError(f"{path}: cannot read job-attempts file: {reason}") from None


def job_record(attempt: JobAttempt) -> dict[str, Any]:
    """One attempt in the file's shape (unix seconds)."""
    return {
        "job": attempt.job,
        "attempt": attempt.attempt,
        "start": attempt.start,
        "end": attempt.end,
        "exit_status": attempt.exit_status,
        "nodes": list(attempt.nodes),
        "automatic": attempt.automatic,
    }


def write_jobs(path: Path, attempts: Iterable[JobAttempt]) -> int:
    """Write attempts as JSONL (``.gz`` by suffix); ``load_jobs`` gives them back. Returns
    how many lines were written."""
    count = 0
    with open_text(path, write=True) as handle:
        for attempt in attempts:
            handle.write(json.dumps(job_record(attempt)) + "\n")
            count += 1
    return count
