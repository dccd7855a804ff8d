"""The project's exceptions. Every error a user can cause names where it came from.

    DetectorError                 base; cli.py maps it to exit code 2 (bad input)
    ├── ConfigError               config/rules/calibration file: names file and field
    ├── ParseError                exposition text: names source, line number and content
    ├── DumpError                 a dump file: names file and line (or byte offset)
    ├── EventsError               an events JSONL file: names file and line
    ├── JobsError                 a job-attempts JSONL file (--jobs): names file, line, field
    ├── ScrapeError               one target's scrape failed (httpx errors translated in
    │                             ingest/scrape.py only); carries target and reason
    ├── RemoteWriteError          a remote-write request is unusable (snappy and protobuf
    │                             errors translated in ingest/remote_write/ only); carries reason
    ├── StateError                a state file cannot be read or written
    ├── AlertDeliveryError        an Alertmanager did not accept alerts
    └── ActionError               a scheduler refused or missed an exclusion or release
                                  (httpx errors translated in actions/kubernetes.py and
                                  actions/webhook.py, scontrol's exit in actions/slurm.py)

Anything else escaping to cli.py is a bug and exits 1.
"""

from __future__ import annotations


class DetectorError(Exception):
    """Base of every error the project raises on purpose."""


class ConfigError(DetectorError):
    """A config, rules or calibration file is invalid. The message names file and field."""


class ParseError(DetectorError):
    """Exposition text could not be parsed."""

    def __init__(self, source: str, line: int, content: str, reason: str) -> None:
        self.source = source
        self.line = line
        self.content = content
        self.reason = reason
        shown = content if len(content) <= 200 else content[:200] + "..."
        super().__init__(f"{source}:{line}: {reason}: {shown!r}")


class DumpError(DetectorError):
    """A dump file is unreadable or malformed. The message names the file and the line."""


class EventsError(DetectorError):
    """An events file is malformed. The message names the file and the line."""


class JobsError(DetectorError):
    """A job-attempts file is malformed. The message names the file, the line and the field."""


class ScrapeError(DetectorError):
    """One scrape of one target failed."""

    def __init__(self, target: str, reason: str, detail: str = "") -> None:
        self.target = target
        self.reason = reason
        self.detail = detail
        super().__init__(f"scrape {target}: {reason}" + (f": {detail}" if detail else ""))


class RemoteWriteError(DetectorError):
    """A Prometheus remote-write request could not be read. ``reason`` is one of
    ``too_large`` (body or declared decoded size over the limit), ``unsupported_media_type``
    (not remote-write 1.0: another Content-Type or a 2.0 ``proto=``), ``encoding`` (not
    snappy), ``snappy`` (corrupt compression), ``protobuf`` (not a WriteRequest), ``series``
    (a series the index cannot take: no metric name, a label name twice)."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"remote write: {reason}: {detail}")


class StateError(DetectorError):
    """A state file could not be read or written."""


class AlertDeliveryError(DetectorError):
    """An Alertmanager rejected alerts or could not be reached."""


class ActionError(DetectorError):
    """An exclusion or release did not happen. The message names the node and the system."""
