"""The daemon's configuration: pydantic models, loaded from YAML plus ``DETECTOR_*`` variables.

Contract:

- ``load_config(path, env)`` reads the YAML file (``None``: no file, all defaults), then applies
  environment overrides, then validates. Every section has production defaults, so an empty
  file is a valid config.
- Environment: ``DETECTOR_<SECTION>__<KEY>=value`` (double underscore nests, names are
  case-insensitive), e.g. ``DETECTOR_SCRAPE__TIMEOUT_S=5``, ``DETECTOR_ALERTS__SHADOW=true``,
  ``DETECTOR_MODE=agent``. Values are parsed as YAML (``true``, ``5``, ``[a, b]``). The
  environment wins over the file. Kubernetes service-link variables (``DETECTOR_SERVICE_HOST``,
  ``DETECTOR_PORT_9108_TCP``...) that a Service named ``detector`` injects are ignored, and
  so are the project's own switches ``DETECTOR_DEBUG`` (cli.py) and ``DETECTOR_FAULT_TRACE``
  (the simulator).
- Relative paths written in the file are relative to the file's directory (as Prometheus does);
  paths from the environment are used as given.
- Any problem raises ``ConfigError`` with one line per problem naming the source (file, or
  the environment variable that set the value) and the field path::

      config.yaml: scrape.timeout_s: must be > 0 (got -1)
      config.yaml: scrape.timeot_s: unknown key (did you mean 'timeout_s'?)

- Resolved by ``load_config`` (``None`` in the models means "derive"): ``node_name`` in agent
  mode (``NODE_NAME`` variable, else the host name) and ``kmsg.enabled`` (on in agent mode).
- JSON schema for editors and docs: ``Config.model_json_schema()``, e.g.::

      python -c "import json, detector.config as c; \\
                 print(json.dumps(c.Config.model_json_schema(), indent=1))"
- Secrets (basic-auth hashes) are ``SecretStr``: never shown by repr, summaries or errors.
"""

from __future__ import annotations

import difflib
import os
import re
import socket
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from detector.config.schema import DEFAULT_THRESHOLD, Config
from detector.config.yamlfile import read_yaml
from detector.errors import ConfigError

# The section models live in (and are imported from) detector.config_schema; Config is
# re-exported because load_config returns it.
__all__ = ["Config", "check_config", "describe_config", "load_config"]

ENV_PREFIX = "DETECTOR_"
# A Kubernetes Service named "detector" injects these into every pod of the namespace.
_SERVICE_LINK = re.compile(
    r"DETECTOR_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\d+_(TCP|UDP|SCTP)(_\w+)?)?)", re.I
)
# The project's own switches, read elsewhere, never config fields: DETECTOR_DEBUG=1 (cli.py: print
# tracebacks) must not make every command fail with "debug: unknown key".
_NOT_CONFIG = frozenset({"DETECTOR_DEBUG", "DETECTOR_FAULT_TRACE"})
# Paths written in the file are relative to the file (as Prometheus resolves rule_files).
_FILE_PATH_FIELDS = (
    ("targets", "file_sd"),
    ("rules", "signals"),
    ("rules", "xid"),
    ("calibration", "path"),
    ("state", "path"),
    ("server", "tls_cert"),
    ("server", "tls_key"),
    ("kmsg", "path"),
)
# scrape.max_series_total by mode, where the config leaves it out (~1.8 KB a series)
AGENT_MAX_SERIES = 250_000
FLEET_MAX_SERIES = 2_000_000
_SECRET_WORDS = ("basic_auth", "password", "token", "secret", "authorization")

Loc = tuple[str | int, ...]


def load_config(path: Path | None, env: Mapping[str, str] | None = None) -> Config:
    """Load ``path`` (None: defaults only), apply ``DETECTOR_*`` overrides from ``env``
    (default ``os.environ``), validate, and resolve derived values. Raises ConfigError."""
    env = os.environ if env is None else env
    data = _read_file(path) if path is not None else {}
    if path is not None:
        _rebase_paths(data, path.parent)
    env_sources = _apply_env(data, env)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        label = str(path) if path is not None else "config"
        raise ConfigError(_describe(exc, label, env_sources)) from None
    return _resolve(config, env)


def check_config(path: Path, env: Mapping[str, str] | None = None) -> str:
    """Validate ``path`` as ``detector run`` would and return a summary for a person.

    Raises ConfigError when invalid. Files the config names that do not exist (yet) are
    listed as warnings, not errors: file_sd files and state may appear later.
    """
    env = os.environ if env is None else env
    return describe_config(load_config(path, env), path, env)


def describe_config(c: Config, path: Path, env: Mapping[str, str]) -> str:
    """``check_config``'s summary of a config already loaded from ``path`` with ``env``."""
    lines = [f"{path}: valid"]
    where = f"node {c.node_name}" if c.mode == "agent" else f"shard {c.shard or 'none'}"
    lines.append(f"  mode: {c.mode} ({where})")
    sd = ", ".join(str(p) for p in c.targets.file_sd) or "none"
    lines.append(f"  targets: {len(c.targets.static)} static, file_sd: {sd}")
    s = c.scrape
    lines.append(
        f"  scrape: every {s.interval_s:g}s, timeout {s.timeout_s:g}s, "
        f"body limit {s.body_limit_bytes / (1024 * 1024):g} MiB, "
        f"at most {s.max_series_total:,} series"
    )
    lb = c.labels
    cohorts = ", ".join(lb.cohort_labels) or "none (one cohort)"
    drops = ", ".join(f"{label}=~{pattern}" for label, pattern in lb.drop.items()) or "none"
    workloads = ", ".join(lb.gpu_workload_labels) or "none (a node's GPUs are all peers)"
    if lb.gpu_workload_labels and "pod" in lb.gpu_workload_labels:
        workloads += " (a pod's: its owner)" if lb.gpu_workload_pod_owner else " (each pod its own)"
    lines.append(
        f"  labels: cohorts by {cohorts}; GPU workloads by {workloads}; "
        f"series dropped where {drops}"
    )
    a = c.alerts
    threshold = (
        f"{a.threshold:g}"
        if a.threshold is not None
        else f"from calibration, else {DEFAULT_THRESHOLD:g}"
    )
    sinks = ", ".join(a.alertmanager_urls) or "no Alertmanager"
    lines.append(
        f"  alerts: threshold {threshold}, clear at x{a.clear_ratio:g}, "
        f"{'SHADOW (nothing sent)' if a.shadow else sinks}"
    )
    lines.append(f"  calibration: {c.calibration.path or 'none'}")
    state = f"{c.state.path} every {c.state.save_interval_s:g}s" if c.state.path else "not saved"
    lines.append(f"  state: {state}")
    srv = c.server
    tls = "on" if srv.tls_cert else "off"
    lines.append(f"  server: {srv.listen}, tls {tls}, basic auth users: {len(srv.basic_auth)}")
    lines.append(f"  kmsg: {c.kmsg.path if c.kmsg.enabled else 'off'}")
    lines.append(f"  logging: {c.logging.level}, {c.logging.format}")
    overrides = sorted(n for n in env if _is_config_var(n))
    if overrides:
        lines.append(f"  environment overrides: {', '.join(overrides)}")
    named = [*c.targets.file_sd, c.rules.signals, c.rules.xid, c.calibration.path]
    named += [srv.tls_cert, srv.tls_key]
    lines += [f"  warning: {p} {_missing(p)}" for p in named if p is not None and _missing(p)]
    if "pod" in lb.cohort_labels and not lb.gpu_workload_pod_owner:
        lines.append(
            "  warning: labels.cohort_labels names pod while labels.gpu_workload_pod_owner is "
            "false: each node's own pods name its cohort, so no node has cohort peers"
        )
    return "\n".join(lines)


def _missing(path: Path) -> str:
    """Why a named file is absent ("" when present); file_sd names may be globs."""
    if any(ch in path.name for ch in "*?["):
        return "" if any(path.parent.glob(path.name)) else "matches no file"
    return "" if path.exists() else "does not exist"


def _read_file(path: Path) -> dict[Any, Any]:
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of sections (got {type(data).__name__})"
        )
    # "scrape:" with everything below commented out means "defaults", not "invalid".
    return {k: v for k, v in data.items() if not (v is None and _is_section(k))}


def _is_section(key: Any) -> bool:
    field = Config.model_fields.get(key) if isinstance(key, str) else None
    return field is not None and bool(_models_in(field.annotation))


def _rebase_paths(data: dict[Any, Any], base: Path) -> None:
    for section, key in _FILE_PATH_FIELDS:
        block = data.get(section)
        if not isinstance(block, dict) or key not in block:
            continue
        value = block[key]
        if isinstance(value, str) and value and not Path(value).is_absolute():
            block[key] = str(base / value)
        elif isinstance(value, list):
            block[key] = [
                str(base / v) if isinstance(v, str) and v and not Path(v).is_absolute() else v
                for v in value
            ]


def _is_config_var(name: str) -> bool:
    upper = name.upper()
    return (
        upper.startswith(ENV_PREFIX)
        and upper not in _NOT_CONFIG
        and not _SERVICE_LINK.fullmatch(name)
    )


def _apply_env(data: dict[Any, Any], env: Mapping[str, str]) -> dict[Loc, str]:
    """Write ``DETECTOR_A__B=v`` into ``data["a"]["b"]``; return field path -> variable."""
    sources: dict[Loc, str] = {}
    for name in sorted(n for n in env if _is_config_var(n)):
        parts = tuple(p.lower() for p in name[len(ENV_PREFIX) :].split("__"))
        if not all(parts):
            raise ConfigError(
                f"{name}: empty name segment (nest with '__', e.g. DETECTOR_SCRAPE__TIMEOUT_S)"
            )
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ConfigError(f"{name}: cannot set a key under {where}: it is not a section")
            node = child
        raw = env[name]
        node[parts[-1]] = raw if _wants_text(parts) else _parse_env_value(raw)
        sources[parts] = name
    return sources


def _wants_text(parts: tuple[str, ...]) -> bool:
    """True for text fields (names, URLs, paths): ``0123`` or ``no`` must stay as written."""
    model = _model_at(parts[:-1])
    field = model.model_fields.get(parts[-1]) if model is not None else None
    if field is None:
        return False
    annotation = field.annotation
    union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    kinds = set(typing.get_args(annotation)) if union else {annotation}
    return bool(kinds & {str, Path})  # list[str], Literal[...] and sections parse as YAML


def _parse_env_value(raw: str) -> Any:
    """A YAML scalar (``5``, ``true``, ``null``) or flow list; anything unparsable is text."""
    try:
        return yaml.safe_load(raw)
    except (yaml.YAMLError, ValueError, RecursionError):  # ValueError: a date like 2023-02-30
        return raw


def _describe(exc: ValidationError, file_label: str, env_sources: dict[Loc, str]) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc: Loc = tuple(err["loc"])
        source = _source_of(loc, file_label, env_sources)
        lines.append(f"{source}: {_dotted(loc) or '(top level)'}: {_message(err, loc)}")
    return "\n".join(lines)


def _source_of(loc: Loc, file_label: str, env_sources: dict[Loc, str]) -> str:
    """The variable that set this field (or a field under this section), else the file."""
    names = [name for p, name in env_sources.items() if p == loc[: len(p)] or loc == p[: len(loc)]]
    return ", ".join(sorted(names)) if names else file_label


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(err: Any, loc: Loc) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    secret = any(w in str(p).lower() for p in loc for w in _SECRET_WORDS)
    shown = "<hidden>" if secret else _short(value)
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<"}
    bounds["less_than_equal"] = "<="
    if kind in ("extra_forbidden", "missing"):
        model = _model_at(loc[:-1])
        return plain_message(err, shown, list(model.model_fields) if model is not None else None)
    if kind in bounds:
        limit = next(iter(ctx.values()))
        limit = f"{limit:g}" if isinstance(limit, float) else limit
        return f"must be {bounds[kind]} {limit} (got {shown})"
    if kind in ("value_error", "assertion_error"):
        return str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        got = "a list" if isinstance(value, list) else "a single value"
        model = _model_at(loc)
        hint = ""
        if isinstance(value, str) and model is not None and "url" in model.model_fields:
            hint = f"; write the item as 'url: {value}'"  # Prometheus habit: bare target strings
        return f"must be a mapping of keys (a section), not {got} (got {shown}){hint}"
    if kind == "list_type" and isinstance(value, str):
        return f"must be a list (got {shown}); write [{value}], or one '- ' line per item"
    return plain_message(err, shown)


def plain_message(err: Any, shown: str | None = None, keys: Sequence[str] | None = None) -> str:
    """One pydantic validation error in the project's words: "unknown key" (with the closest
    of ``keys`` suggested, or all of them listed), "required", or "must be ... (got ...)".
    ``shown``: the offending value as it may be printed (default: its short repr)."""
    kind = err["type"]
    if kind == "extra_forbidden":
        key = err["loc"][-1]
        if keys is None or not isinstance(key, str):
            return "unknown key"
        close = difflib.get_close_matches(key.lower(), list(keys), n=1, cutoff=0.6)
        return (
            f"unknown key (did you mean {close[0]!r}?)"
            if close
            else (f"unknown key (valid keys: {', '.join(keys)})")
        )
    if kind == "missing":
        return "required"
    msg = str(err["msg"]).replace("Input should be", "must be")
    got = _short(err.get("input")) if shown is None else shown
    return f"{msg[:1].lower()}{msg[1:]} (got {got})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The model class that validates the mapping at ``loc`` (list indices skipped)."""
    model: type[BaseModel] = Config
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        models = _models_in(field.annotation) if field is not None else []
        if not models:
            return None
        model = models[0]
    return model


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _resolve(config: Config, env: Mapping[str, str]) -> Config:
    """Fill the values whose default depends on the mode or the host."""
    update: dict[str, Any] = {}
    if config.mode == "agent" and not config.node_name:
        update["node_name"] = env.get("NODE_NAME") or socket.gethostname()
    if config.kmsg.enabled is None:
        update["kmsg"] = config.kmsg.model_copy(update={"enabled": config.mode == "agent"})
    if config.scrape.max_series_total is None:
        cap = AGENT_MAX_SERIES if config.mode == "agent" else FLEET_MAX_SERIES
        update["scrape"] = config.scrape.model_copy(update={"max_series_total": cap})
    return config.model_copy(update=update) if update else config
