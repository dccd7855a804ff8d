"""``detector actions``: what the detector has excluded and why; release a node; close the
breaker. Reads the daemon's state file (``state.path``, its ``actions`` part) and the inbox
beside it (detector/actions/inbox.py).

``release NODE`` releases the node in the scheduler at once (uncordon and untaint, ``State=
RESUME`` or a webhook "release" event; nothing for an exclusion made in dry-run), then posts
the release to the inbox, which the running detector reads on its next tick (a stopped one on
its next start), so its own record forgets the exclusion and never re-excludes the node for
the same alert.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

from ..actions import (
    STATE_KEY,
    ActionRequest,
    Decision,
    Exclusion,
    build_executor,
    inbox_path,
    post_request,
    read_inbox,
)
from ..config import Config, load_config
from ..errors import ConfigError, DetectorError
from ..service import load_state

__all__ = ["cmd_actions"]


def cmd_actions(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    state_path = _state_path(args, config)
    excluded, breaker = _read(state_path)
    pending = read_inbox(inbox_path(state_path))
    released = {r.node: r for r in pending if r.op == "release"}
    if args.actions_command == "release":
        return _release(config, state_path, excluded, released, args.node, args.by)
    if args.actions_command == "close-breaker":
        if breaker is None or any(r.op == "close_breaker" for r in pending):
            print("the action breaker is not open")
            return 0
        post_request(
            inbox_path(state_path), ActionRequest("close_breaker", "", args.by, time.time())
        )
        print(f"breaker close posted for the detector (opened: {breaker.get('reason')})")
        return 0
    _list(config, excluded, breaker, released)
    return 0


def _state_path(args: argparse.Namespace, config: Config) -> Path:
    path = args.state or config.state.path
    if path is None:
        raise ConfigError(
            "actions: no state file: set state.path in the config (the daemon keeps its "
            "exclusions there) or pass --state FILE"
        )
    return Path(path)


def _read(state_path: Path) -> tuple[dict[str, Exclusion], dict[str, object] | None]:
    loaded = load_state(state_path)
    loop = loaded[1].get("loop") if loaded is not None else None  # the tick loop's state
    part = loop.get(STATE_KEY) if isinstance(loop, dict) else None
    if not isinstance(part, dict):
        return {}, None
    try:
        excluded = {e.node: e for e in map(Exclusion.from_dict, part["excluded"])}
    except (KeyError, TypeError, ValueError) as exc:
        raise DetectorError(f"{state_path}: actions state unreadable: {exc}") from exc
    breaker = part.get("breaker")
    return excluded, breaker if isinstance(breaker, dict) else None


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _list(
    config: Config,
    excluded: dict[str, Exclusion],
    breaker: dict[str, object] | None,
    released: dict[str, ActionRequest],
) -> None:
    mode = (
        "off"
        if not config.actions.enabled
        else ("dry-run" if config.actions.dry_run else config.actions.kind)
    )
    print(
        f"actions: {mode}; breaker {'OPEN: ' + str(breaker.get('reason')) if breaker else 'closed'}"
    )
    if not excluded:
        print("no node excluded")
        return
    for e in sorted(excluded.values(), key=lambda e: e.since):
        status = "would exclude (dry run)" if e.dry_run else "excluded"
        if e.node in released:
            r = released[e.node]
            status = f"released by {r.by} at {_when(r.time)} (the detector has not read it yet)"
        print(f"{e.node}  {status} since {_when(e.since)}  class {e.failure_class or '-'}")
        print(f"    reason: {e.reason}; alert {e.alert_id}")
        if e.evidence:
            print(f"    evidence: {', '.join(e.evidence)}")


def _release(
    config: Config,
    state_path: Path,
    excluded: dict[str, Exclusion],
    released: dict[str, ActionRequest],
    node: str,
    by: str,
) -> int:
    exclusion = excluded.get(node)
    if exclusion is None or node in released:
        known = ", ".join(sorted(set(excluded) - set(released))) or "none"
        raise DetectorError(
            f"actions release: {node} is not excluded by the detector (excluded: {known})"
        )
    now = time.time()
    decision = Decision(
        action="release",
        node=node,
        time=now,
        reason=f"released by {by}",
        alert_id=exclusion.alert_id,
        failure_class=exclusion.failure_class,
        evidence=exclusion.evidence,
        dry_run=exclusion.dry_run,
        by=by,
    )
    if not exclusion.dry_run:
        asyncio.run(_carry_out(config, decision))
    post_request(inbox_path(state_path), ActionRequest("release", node, by, now))
    done = (
        "recorded (a dry-run exclusion: nothing to undo)"
        if exclusion.dry_run
        else (f"released through {config.actions.kind}")
    )
    print(f"{node}: {done}")
    return 0


async def _carry_out(config: Config, decision: Decision) -> None:
    executor = build_executor(config.actions)
    try:
        await executor.release(decision)
    finally:
        await executor.aclose()
