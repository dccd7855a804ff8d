"""Fault to notification, live: how long after a planted fault Alertmanager has the alert and its
receiver is notified, per failure kind, with real processes.

    python bench/fault_to_notification.py [--interval 1] [--speed 30] [--group-wait 0s]

Starts, on loopback: Debian's ``/usr/bin/prometheus-alertmanager`` (one route to a webhook
receiver this script serves; ``group_wait`` as given, grouped by alertname and node),
``detector simulate --serve`` (this checkout) with one failure planted per kind on its own node
(``--failure-at``; two nodes stay healthy) and ``detector run`` scraping it every ``--interval``
wall seconds with no kernel log (so a GPU that falls off the bus sends no XID: its XID gauge
vanishes with it). Alertmanager's ``/api/v2/alerts`` is polled every 50 ms: an alert's receipt is
its ``updatedAt`` the first time it is listed; a notification's is when the webhook got it.

The cluster runs ``--speed`` simulated seconds per wall second, so a scrape interval spans
``interval x speed`` simulated seconds (30 by default, as a 30 s deployment) and hours of
precursor take minutes. Every duration of the daemon's config (scoring half-lives and warm-up,
the alerts' minimum duration, hold, resend, storm window) is its default divided by the speed,
so the daemon sees the same cluster a default deployment at that interval would, compressed.
Times are printed in wall seconds and in scrape intervals, from the fault (the final XID, or the
GPU leaving the bus) and from its precursor's onset (negative: before it). The fault's wall time
is the serve's start (its first stderr line's arrival) plus the plan's offset.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
# XID -> kind planted (detector simulate --failure-at), one node each, in this order
KINDS = (
    (79, "pcie (off the bus)"),
    (94, "ecc"),
    (64, "row remap"),
    (74, "nvlink"),
    (119, "thermal"),
    (43, "straggler"),
)
PLAN = re.compile(r"^  (node-\d+) GPU (\d+): (\w+) failure, XID ([\d, ]+),", re.M)
OFFSET = re.compile(r"\(\+(?:(\d+)h)?(?:(\d+)m)?(\d+)s\)")
DEFAULT_SECONDS = {  # the config's duration defaults (detector/config/schema.py), divided by speed
    "scoring": {
        "zscore_half_life_s": 3600.0,
        "changepoint_half_life_s": 21600.0,
        "warmup_s": 3600.0,
        "common_mode_window_s": 300.0,
        "repeat_hold_s": 60.0,
    },
    "alerts": {
        "min_duration_s": 60.0,
        "cooldown_s": 900.0,
        "clear_duration_s": 60.0,
        "xid_hold_s": 300.0,
        "page_after_s": 600.0,
        "resend_interval_s": 60.0,
    },
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def seconds(match: re.Match[str]) -> float:
    h, m, s = (int(g) if g else 0 for g in match.groups())
    return 3600.0 * h + 60.0 * m + s


class Webhook:
    """Alertmanager's receiver: the wall time each node's firing alert was first notified."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                now = time.time()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                for alert in body.get("alerts", []):
                    node = alert.get("labels", {}).get("node")
                    if alert.get("status") == "firing" and node:
                        hook.first.setdefault(node, now)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"


def start(argv: list[str], log: IO[str], **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True, **kw)


def serve_simulator(
    args: argparse.Namespace, tmp: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[str], str, float, list[dict[str, Any]]]:
    """``detector simulate --serve`` with the failures planted; (process, its targets config,
    its start's wall time, the plan: node, gpu, kind, xid, onset and fault wall times)."""
    argv = [
        sys.executable,
        "-m",
        "detector",
        "simulate",
        "--serve",
        "--port",
        "0",
        "--nodes",
        str(len(KINDS) + 2),
        "--speed",
        str(args.speed),
        "--seed",
        "7",
    ]
    for i, (xid, _) in enumerate(KINDS):
        at = args.first_fault + i * args.spacing
        argv += ["--failure-at", f"{at:g}s:{xid}@node-{i + 1:02d}"]
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    assert proc.stdout is not None
    first = proc.stderr.readline()
    started = time.time()  # the serve's start: it prints this line right after listening
    if not first.startswith("serving"):
        raise RuntimeError(f"detector simulate: {first}{proc.stderr.read()}")
    lines = []
    while not (line := proc.stderr.readline()).startswith("On stdout"):
        if not line:
            raise RuntimeError(f"detector simulate ended: {''.join(lines)}")
        lines.append(line)
    text = "".join(lines)
    (tmp / "sim.log").write_text(first + text)
    plan = []
    for block in re.split(r"(?m)^(?=  node-)", text)[1:]:
        head = PLAN.match(block)
        assert head is not None, block
        offsets = [seconds(m) for m in OFFSET.finditer(block)][::2]  # wall offsets, not simulated
        fault = started + offsets[-1]
        onset = started + offsets[0] if "precursor onset" in block else fault
        plan.append(
            {
                "node": head[1],
                "gpu": head[2],
                "kind": head[3],
                "xid": int(head[4].split(",")[-1]),
                "onset": onset,
                "fault": fault,
            }
        )
    targets = ""
    while "node-" not in targets or len(targets.splitlines()) < 2 + 2 * (len(KINDS) + 2):
        if not (line := proc.stdout.readline()):
            raise RuntimeError(f"detector simulate ended before its config: {targets}")
        targets += line
    return proc, targets, started, plan


def daemon_config(args: argparse.Namespace, am_url: str, port: int, tmp: Path) -> dict[str, Any]:
    doc: dict[str, Any] = {
        section: {k: v / args.speed for k, v in values.items()}
        for section, values in DEFAULT_SECONDS.items()
    }
    doc["scrape"] = {"interval_s": args.interval, "timeout_s": 0.8 * args.interval}
    doc["alerts"] |= {"alertmanager_urls": [am_url], "storm": {"window_s": 300.0 / args.speed}}
    doc["kmsg"] = {"enabled": False}
    doc["server"] = {"listen": f"127.0.0.1:{port}"}
    doc["state"] = {"path": str(tmp / "state.npz")}
    doc["logging"] = {"level": "warning"}
    return doc


def poll_alertmanager(am: str, nodes: set[str], deadline: float) -> dict[str, dict[str, Any]]:
    """Per node, its GPUFailureSuspected alert the first time Alertmanager listed it (with its
    ``updatedAt`` as unix seconds, ``received``), until every node has one or ``deadline``."""
    seen: dict[str, dict[str, Any]] = {}
    with httpx.Client(timeout=5.0) as client:
        while time.time() < deadline and set(seen) < nodes:
            try:
                listed = client.get(f"{am}/api/v2/alerts").json()
            except httpx.HTTPError:
                listed = []
            for alert in listed:
                labels = alert["labels"]
                node = labels.get("node")
                if labels.get("alertname") == "GPUFailureSuspected" and node not in seen:
                    stamp = re.sub(r"(\.\d{6})\d*", r"\1", alert["updatedAt"])
                    received = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
                    seen[node] = {"labels": labels, "received": received}
            time.sleep(0.05)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=1.0, help="scrape interval (wall s)")
    parser.add_argument("--speed", type=float, default=30.0, help="simulated s per wall s")
    parser.add_argument("--group-wait", default="0s", help="Alertmanager route group_wait")
    parser.add_argument("--first-fault", type=float, default=120.0, help="wall s after start")
    parser.add_argument("--spacing", type=float, default=30.0, help="wall s between faults")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if not os.access(ALERTMANAGER, os.X_OK):
        sys.exit(f"{ALERTMANAGER} missing: apt-get install prometheus-alertmanager")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETECTOR_")}
    env["PYTHONPATH"] = str(REPO)
    tmp = Path(tempfile.mkdtemp(prefix="fault-bench-"))
    hook = Webhook()
    am_port, port = free_port(), free_port()
    am_url = f"http://127.0.0.1:{am_port}"
    route = {
        "receiver": "hook",
        "group_by": ["alertname", "node"],
        "group_wait": args.group_wait,
        "group_interval": "5s",
        "repeat_interval": "1h",
    }
    receivers = [{"name": "hook", "webhook_configs": [{"url": hook.url, "send_resolved": False}]}]
    (tmp / "am.yml").write_text(yaml.safe_dump({"route": route, "receivers": receivers}))
    procs: list[subprocess.Popen[str]] = []
    logs = [(tmp / name).open("w") for name in ("am.log", "run.log")]
    try:
        procs.append(
            start(
                [
                    ALERTMANAGER,
                    f"--config.file={tmp / 'am.yml'}",
                    f"--storage.path={tmp / 'am-data'}",
                    "--cluster.listen-address=",
                    f"--web.listen-address=127.0.0.1:{am_port}",
                ],
                logs[0],
            )
        )
        sim, targets, started, plan = serve_simulator(args, tmp, env)
        procs.append(sim)
        config = yaml.safe_load(targets) | daemon_config(args, am_url, port, tmp)
        (tmp / "run.yaml").write_text(yaml.safe_dump(config))
        argv = [sys.executable, "-m", "detector", "run", "--config", str(tmp / "run.yaml")]
        procs.append(start(argv, logs[1], cwd=REPO, env=env))
        last_fault = max(p["fault"] for p in plan)
        found = poll_alertmanager(am_url, {p["node"] for p in plan}, last_fault + 60.0)
        time.sleep(2.0)  # the last notifications' way to the webhook
        healthy = {f"node-{i:02d}" for i in (len(KINDS) + 1, len(KINDS) + 2)}
        report(args, plan, found, hook.first, started, healthy & set(found))
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        for log in logs:
            log.close()
        hook.server.shutdown()
        if args.keep:
            print(f"logs and configs: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def report(
    args: argparse.Namespace,
    plan: list[dict[str, Any]],
    found: dict[str, dict[str, Any]],
    notified: dict[str, float],
    started: float,
    false_alarms: set[str],
) -> None:
    iv = args.interval

    def cell(t: float | None, ref: float) -> str:
        return "-" if t is None else f"{t - ref:+7.1f} s {(t - ref) / iv:+6.1f} iv"

    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        f"fault to notification, live: scrape every {iv:g} s wall at --speed {args.speed:g} "
        f"(an interval spans {iv * args.speed:g} simulated s; the daemon's durations are its "
        f"defaults / {args.speed:g}); Alertmanager group_wait {args.group_wait}; no kernel log"
    )
    print(
        f"machine: {platform.node()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
        f"commit {commit}; serve started {time.strftime('%H:%M:%S', time.gmtime(started))} UTC"
    )
    head = (
        "kind",
        "xid",
        "node/gpu",
        "onset",
        "alertmanager (from fault)",
        "notified (from fault)",
        "alertmanager (from onset)",
        "severity / signal",
    )
    print(
        f"{head[0]:<19}{head[1]:>4}  {head[2]:<10}{head[3]:>9}  {head[4]:<26}{head[5]:<24}"
        f"{head[6]:<26}{head[7]}"
    )
    for p in plan:
        got = found.get(p["node"])
        received = got["received"] if got else None
        labels = got["labels"] if got else {}
        kind = dict(KINDS).get(p["xid"], p["kind"])
        onset = f"{p['onset'] - p['fault']:+.0f} s" if p["onset"] < p["fault"] else "none"
        where = f"{p['node']}/{labels.get('gpu', '-')}"
        print(
            f"{kind:<19}{p['xid']:>4}  {where:<10}{onset:>9}  {cell(received, p['fault']):<26}"
            f"{cell(notified.get(p['node']), p['fault']):<24}{cell(received, p['onset']):<26}"
            f"{labels.get('severity', '-')} / {labels.get('signal', '-')}"
        )
    print(f"healthy nodes alerted: {', '.join(sorted(false_alarms)) or 'none'}")


if __name__ == "__main__":
    main()
