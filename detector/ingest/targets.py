"""What to scrape: static targets, Prometheus file_sd files, agent mode, and fleet sharding.

Contract
    A :class:`Target` is one exporter URL plus its *target labels*: the labels added to every
    series scraped from it (as Prometheus adds ``job``/``instance``). They always contain
    ``instance`` (``host:port`` of the URL, default port by scheme, unless given) and ``node``
    (the explicit node, else a ``node`` label, else the host part of the address).

    :class:`TargetSource` ``.current()`` returns the targets of this process, in a stable order:

    - agent mode (``config.mode == "agent"``): this node's dcgm-exporter and node-exporter on
      localhost (``config.targets.agent_ports``), named ``config.node_name``; or, given
      ``pods`` (``targets.kubernetes``: ingest/kubernetes/pods.py), the exporter pods it
      currently finds on this node;
    - ``config.targets.static`` as written;
    - every ``config.targets.file_sd`` file (Prometheus file_sd, JSON or YAML:
      ``[{"targets": ["host:port"], "labels": {...}}]``; ``__metrics_path__``, ``__scheme__``
      and ``__param_<name>`` honoured, other ``__`` labels dropped). Files are re-read when
      their mtime, size or inode changes, checked at most every ``file_sd_refresh_s``. A file
      that is missing or invalid keeps its last good targets; the error is logged naming the
      file and kept in ``errors`` until the file is good again.

    The same URL listed twice is scraped once (first listing wins). In fleet mode with a shard
    ``i/N`` only the targets whose cohort hashes to ``i`` are kept (:func:`shard_targets`).

Sharding
    Nodes are grouped into cohorts so peers (the nodes compared with each other) land on one
    shard: a node's cohort is the value of the first ``config.labels.cohort_labels`` label
    found on any of its targets, else the node itself. A cohort belongs to shard
    ``crc32(cohort) mod N``: stable across processes and restarts, no coordination needed.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlencode, urlsplit

import yaml

from ..config import Config, Shard
from ..errors import ConfigError
from ..logs import get_logger
from ..model import Labels

__all__ = [
    "PodTargets",
    "Target",
    "TargetKind",
    "TargetSource",
    "cohorts",
    "make_target",
    "parse_file_sd",
    "shard_of",
    "shard_targets",
]

TargetKind = Literal["dcgm", "node", "other"]
_DEFAULT_PORTS = {"http": 80, "https": 443}
_KIND_BY_PORT: dict[int, TargetKind] = {9400: "dcgm", 9100: "node"}
_log = get_logger(component="targets")


@dataclass(frozen=True, slots=True)
class Target:
    """One exporter to scrape. ``labels``: the target labels (sorted; incl. instance, node)."""

    url: str
    node: str
    kind: TargetKind = "other"
    labels: Labels = ()
    instance: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "instance", dict(self.labels).get("instance", ""))


def _address(url: str) -> tuple[str, str]:
    """(host, host:port) of an http(s) URL; the port defaults by scheme."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)
    shown = f"[{host}]" if ":" in host else host  # IPv6 literal, as Prometheus writes it
    return host, f"{shown}:{port}"


def make_target(
    url: str,
    *,
    node: str | None = None,
    kind: TargetKind | None = None,
    labels: Mapping[str, str] | None = None,
) -> Target:
    """A target with its label set completed (instance, node) and its kind inferred when not
    given: port 9400 or a job naming dcgm -> dcgm, port 9100 or a job naming node -> node."""
    given = dict(labels or {})
    host, instance = _address(url)
    given.setdefault("instance", instance)
    name = node or given.get("node") or host
    given["node"] = name
    if kind is None:
        port = urlsplit(url).port or 0
        job = given.get("job", "").lower()
        kind = _KIND_BY_PORT.get(port) or (
            "dcgm" if "dcgm" in job else "node" if "node" in job else "other"
        )
    return Target(url, name, kind, tuple(sorted(given.items())))


def _group_targets(path: Path, i: int, group: Any) -> list[Target]:
    where = f"{path}: [{i}]"
    if not isinstance(group, dict):
        raise ConfigError(f"{where}: a target group must be a mapping with 'targets'")
    unknown = sorted(set(group) - {"targets", "labels"})
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown} (allowed: targets, labels)")
    addresses = group.get("targets")
    if not isinstance(addresses, list):
        raise ConfigError(f"{where}.targets: must be a list of 'host:port' strings")
    labels = group.get("labels") or {}
    if not isinstance(labels, dict):
        raise ConfigError(f"{where}.labels: must be a mapping of label name to string")
    for name, value in labels.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ConfigError(f"{where}.labels.{name}: label values must be strings")
    scheme = labels.get("__scheme__", "http")
    if scheme not in _DEFAULT_PORTS:
        raise ConfigError(f"{where}.labels.__scheme__: must be http or https (got {scheme!r})")
    path_part = labels.get("__metrics_path__", "/metrics")
    if not path_part.startswith("/"):
        raise ConfigError(f"{where}.labels.__metrics_path__: must start with '/'")
    params = {k[len("__param_") :]: v for k, v in labels.items() if k.startswith("__param_")}
    query = f"?{urlencode(params)}" if params else ""
    kept = {k: v for k, v in labels.items() if not k.startswith("__")}
    out = []
    for j, address in enumerate(addresses):
        if not isinstance(address, str) or not address or any(c in address for c in "/ ?#@"):
            raise ConfigError(f"{where}.targets[{j}]: must be 'host:port' (got {address!r})")
        url = f"{scheme}://{address}{path_part}{query}"
        try:
            out.append(make_target(url, labels=kept))
        except ValueError as exc:  # urlsplit: a bad port
            raise ConfigError(f"{where}.targets[{j}]: {exc} (got {address!r})") from None
    return out


def parse_file_sd(path: Path, text: str) -> list[Target]:
    """Targets of one file_sd file's text (JSON for ``.json``, else YAML). Raises
    ConfigError naming the file and the group/field at fault."""
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise ConfigError(f"{path}: must be a list of target groups")
    return [t for i, group in enumerate(data) for t in _group_targets(path, i, group)]


def cohorts(targets: Iterable[Target], cohort_labels: Sequence[str]) -> dict[str, str]:
    """node -> cohort: the first cohort label found on any of the node's targets (label
    order first, then target order), else the node name itself."""
    found: dict[str, str] = {}
    rank: dict[str, int] = {}
    for target in targets:
        labels = dict(target.labels)
        found.setdefault(target.node, target.node)
        for r, name in enumerate(cohort_labels):
            value = labels.get(name)
            if value and r < rank.get(target.node, len(cohort_labels)):
                found[target.node], rank[target.node] = f"{name}={value}", r
                break
    return found


def shard_of(cohort: str, count: int) -> int:
    """The shard owning a cohort: crc32 of its name mod ``count`` (stable everywhere)."""
    return zlib.crc32(cohort.encode()) % count


def shard_targets(
    targets: Sequence[Target], shard: Shard, cohort_labels: Sequence[str]
) -> list[Target]:
    """The targets whose node's cohort belongs to ``shard`` (see the module docstring)."""
    of_node = cohorts(targets, cohort_labels)
    return [t for t in targets if shard_of(of_node[t.node], shard.count) == shard.index]


class PodTargets(Protocol):
    """Targets found elsewhere and followed (kubernetes.PodDiscovery); ``version`` changes
    whenever ``targets()`` does."""

    @property
    def version(self) -> int: ...

    def targets(self) -> list[Target]: ...


@dataclass
class _WatchedFile:
    signature: tuple[int, int, int] | None = None  # (mtime_ns, size, inode) of the last read
    targets: list[Target] = field(default_factory=list)  # last good


class TargetSource:
    """The current targets of this process (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        *,
        shard: Shard | None = None,
        clock: Callable[[], float] = time.monotonic,
        pods: PodTargets | None = None,
    ) -> None:
        self.config = config
        self.pods = pods  # agent mode: this node's exporters as found in Kubernetes
        self._pods_version = -1
        self.shard = shard if shard is not None else config.shard
        self.clock = clock
        self.errors: dict[Path, str] = {}  # file -> current error, while it is bad
        self._files = {Path(p): _WatchedFile() for p in config.targets.file_sd}
        self._checked_at: float | None = None
        self._current: list[Target] | None = None

    def _fixed(self) -> list[Target]:
        config, out = self.config, []
        if config.mode == "agent" and self.pods is not None:
            out.extend(self.pods.targets())
        elif config.mode == "agent":
            node = config.node_name or "localhost"
            ports = config.targets.agent_ports
            out.append(
                make_target(f"http://localhost:{ports.dcgm}/metrics", node=node, kind="dcgm")
            )
            out.append(
                make_target(f"http://localhost:{ports.node}/metrics", node=node, kind="node")
            )
        for static in config.targets.static:
            out.append(
                make_target(static.url, node=static.node, kind=static.kind, labels=static.labels)
            )
        return out

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read file_sd files whose signature changed (when due, or ``force``); returns
        whether the target list changed."""
        now = self.clock()
        due = (
            self._checked_at is None
            or now - self._checked_at >= self.config.targets.file_sd_refresh_s
        )
        if not (force or due):
            return False
        self._checked_at = now
        changed = False
        for path, watched in self._files.items():
            changed |= self._reload(path, watched)
        if changed:
            self._current = None
        return changed

    def _reload(self, path: Path, watched: _WatchedFile) -> bool:
        try:
            st = path.stat()
            signature = (st.st_mtime_ns, st.st_size, st.st_ino)
            if signature == watched.signature:
                return False
            watched.signature = signature
            targets = parse_file_sd(path, path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ConfigError) as exc:
            message = str(exc) if isinstance(exc, ConfigError) else f"{path}: {exc}"
            if self.errors.get(path) != message:  # log each distinct problem once
                _log.error(
                    "file_sd file rejected, keeping its last good targets",
                    file=str(path),
                    error=message,
                    kept=len(watched.targets),
                )
            self.errors[path] = message
            if isinstance(exc, OSError):
                watched.signature = None  # retry when it reappears
            return False
        self.errors.pop(path, None)
        if targets == watched.targets:
            return False
        _log.info("file_sd file loaded", file=str(path), targets=len(targets))
        watched.targets = targets
        return True

    def current(self) -> list[Target]:
        """This process's targets now (file_sd refreshed when due)."""
        self.refresh()
        if self.pods is not None and self.pods.version != self._pods_version:
            self._pods_version, self._current = self.pods.version, None
        if self._current is None:
            seen: set[str] = set()
            merged = []
            for target in self._fixed() + [t for w in self._files.values() for t in w.targets]:
                if target.url not in seen:
                    seen.add(target.url)
                    merged.append(target)
            if self.shard is not None and self.config.mode == "fleet":
                merged = shard_targets(merged, self.shard, self.config.labels.cohort_labels)
            self._current = merged
        return list(self._current)
