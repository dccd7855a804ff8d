"""Structured logging: one set-up call, JSON lines by default, secrets never written.

Contract:

- Importing this module configures nothing. ``configure_logging(level, fmt, stream)`` is called
  once by cli.py (again in tests); it sets structlog *and* the standard library's root logger
  (so httpx, asyncio and uvloop records come out in the same format).
- A JSON line carries at least ``timestamp`` (ISO 8601, UTC), ``level`` and ``event``, plus the
  bound context: ``{"timestamp": "...", "level": "info", "event": "scrape done", "target": ...}``.
- ``get_logger(**context)`` returns a lazy logger: safe at module level, it follows whatever
  configuration is in force when it logs.
- JSON keys come in the order timestamp, level, event, then the rest (easy to read raw).
- ``redact_secrets`` runs on every event: values under keys that look like secrets (password,
  token, authorization, secret, basic_auth, cookie, api_key), at any nesting depth, become
  ``[REDACTED]``; so do the password of ``user:pass@`` URLs and the credential of
  ``Bearer``/``Basic`` values and ``token=...`` style pairs anywhere in strings (the event text
  included).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO, cast

import structlog
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

__all__ = ["REDACTED", "configure_logging", "get_logger", "redact_secrets"]

REDACTED = "[REDACTED]"
LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_SECRET_KEY = re.compile(
    r"password|passwd|token|authorization|secret|basic_auth|cookie|api_?key", re.IGNORECASE
)
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:@/\s]*):[^@/\s]+@")
_KEY_VALUE = re.compile(
    r"(?P<key>\b[\w-]*(?:password|passwd|token|secret|api_?key)[\w-]*)(?P<sep>\s*[=:]\s*)"
    r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;&}]+)",
    re.IGNORECASE,
)
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
# Chatty at INFO (httpx logs every request): at our scrape rate that would drown the log.
_QUIET_LIBRARIES = ("httpx", "httpcore", "asyncio")
_HANDLER_MARK = "_detector_handler"


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: replace secret values (see module docstring) before rendering."""
    return {key: _redact(key, value) for key, value in event_dict.items()}


def _redact(key: object, value: Any) -> Any:
    if isinstance(key, str) and _SECRET_KEY.search(key) and value is not None:
        return REDACTED
    if isinstance(value, str):
        return _redact_text(value)
    if isinstance(value, Mapping):
        return {k: _redact(k, v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        # A list of (name, value) pairs (e.g. HTTP headers) is redacted by the pair's name.
        return [(v[0], _redact(v[0], v[1])) if _is_pair(v) else _redact(None, v) for v in value]
    return value


def _is_pair(value: Any) -> bool:
    return isinstance(value, tuple | list) and len(value) == 2 and isinstance(value[0], str)


def _redact_text(text: str) -> str:
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    text = _KEY_VALUE.sub(lambda m: f"{m['key']}{m['sep']}{REDACTED}", text)
    return _AUTH_SCHEME.sub(lambda m: f"{m['scheme']} {REDACTED}", text)


def _lead_keys(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    lead = {k: event_dict[k] for k in ("timestamp", "level", "event") if k in event_dict}
    return lead | {k: v for k, v in event_dict.items() if k not in lead}


def _processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        redact_secrets,
    ]


def configure_logging(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Configure structlog and the stdlib root logger. ``stream`` None means sys.stderr.

    Raises ValueError on an unknown level or format (config validation catches both first).
    """
    level_no = LEVELS.get(level.lower())
    if level_no is None:
        raise ValueError(f"log level must be one of {sorted(LEVELS)} (got {level!r})")
    if fmt not in ("json", "console"):
        raise ValueError(f"log format must be 'json' or 'console' (got {fmt!r})")
    out = sys.stderr if stream is None else stream
    renderers: list[Processor] = (
        [_lead_keys, structlog.processors.JSONRenderer()]
        if fmt == "json"
        else [structlog.dev.ConsoleRenderer(colors=False)]
    )
    structlog.configure(
        processors=[*_processors(), *renderers],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        # Not cached: a reconfiguration (tests, SIGHUP) must reach loggers made at import.
        cache_logger_on_first_use=False,
    )
    _route_stdlib(level_no, renderers, out)
    # Python warnings (numpy's RuntimeWarnings where kernels run interpreted, deprecations)
    # become log lines of the same format through the stdlib "py.warnings" logger, not raw
    # text on stderr.
    logging.captureWarnings(False)  # re-install: a test harness may have replaced the hook
    logging.captureWarnings(True)


def _route_stdlib(level_no: int, renderers: list[Processor], out: TextIO) -> None:
    """Send stdlib records through the same processors; replace only our own handler."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *_processors()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderers],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_no)
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(level_no, logging.WARNING))


def get_logger(**context: Any) -> FilteringBoundLogger:
    """A logger carrying ``context`` on every event (e.g. ``component="scrape"``)."""
    return cast(FilteringBoundLogger, structlog.get_logger(**context))
