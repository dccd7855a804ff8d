"""Time from process start to the first scored tick of ``detector run``: cold, warm, seeded.

    python bench/start_bench.py [--nodes 4] [--gpus 8] [--rounds 1]

Serves the simulated exporters (detector.sim.serve) on loopback and starts ``detector run``
(this checkout's package, a subprocess) against them three ways per round, timing from
``Popen`` to the first completed tick on its /metrics (``detector_tick_duration_seconds_count``
>= 1; the first tick scores every series):

- cold: an empty ``NUMBA_CACHE_DIR``: every kernel compiles (a pod without the image's cache);
- warm: the directory the cold run filled (a restart, or the image's own cache directory);
- seeded: an empty ``NUMBA_CACHE_DIR`` and ``NUMBA_CACHE_SEED_DIR`` naming the warm
  directory (a pod of the Dockerfile's image under the Helm chart: /tmp emptyDir + baked seed).

``NUMBA_CPU_NAME`` is the Dockerfile's (``generic``) unless ``--cpu-name`` says otherwise.
Prints one row per variant with the ratio to cold measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's detector, as the daemon subprocess runs it

from detector.sim import Scenario, serve  # noqa: E402

TICK = re.compile(r"^detector_tick_duration_seconds_count (\S+)$", re.M)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def first_tick_s(config: Path, port: int, env: dict[str, str], deadline_s: float) -> float:
    """Seconds from starting ``detector run`` to its first completed tick."""
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "detector", "run", "--config", str(config)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while time.perf_counter() - began < deadline_s:
            if proc.poll() is not None:
                raise RuntimeError(f"detector run exited {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
            try:
                found = TICK.search(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text)
            except httpx.HTTPError:
                found = None
            if found and float(found[1]) >= 1:
                return time.perf_counter() - began
            time.sleep(0.05)
        raise RuntimeError(f"no tick within {deadline_s:g} s")
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cpu-name", default="generic", help="NUMBA_CPU_NAME ('' for the host)")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds per start")
    args = parser.parse_args()

    scenario = Scenario(nodes=args.nodes, gpus=args.gpus, days=1.0, fault_trace=None, seed=3)
    exporters = serve(scenario, port=0, speed=60.0)
    port = free_port()
    static = [
        {"url": url, "node": node, "kind": kind}
        for node, (dcgm, node_url) in exporters.urls.items()
        for url, kind in ((dcgm, "dcgm"), (node_url, "node"))
    ]
    times: dict[str, list[float]] = {"cold": [], "warm": [], "seeded": []}
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "DETECTOR_"))}
    if args.cpu_name:
        base["NUMBA_CPU_NAME"] = args.cpu_name
    try:
        with tempfile.TemporaryDirectory(prefix="start-bench-") as tmp:
            config = Path(tmp) / "config.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "targets": {"static": static},
                        "scrape": {"interval_s": 1.0, "timeout_s": 0.8},
                        "server": {"listen": f"127.0.0.1:{port}"},
                        "kmsg": {"enabled": False},
                        "logging": {"level": "warning"},
                    }
                )
            )
            for r in range(args.rounds):
                cache, pod = Path(tmp) / f"cache-{r}", Path(tmp) / f"pod-{r}"
                for name, env in (
                    ("cold", {"NUMBA_CACHE_DIR": str(cache)}),
                    ("warm", {"NUMBA_CACHE_DIR": str(cache)}),
                    (
                        "seeded",
                        {"NUMBA_CACHE_DIR": str(pod), "NUMBA_CACHE_SEED_DIR": str(cache)},
                    ),
                ):
                    times[name].append(first_tick_s(config, port, base | env, args.deadline))
    finally:
        exporters.close()

    cold = statistics.median(times["cold"])
    print(
        f"detector run, {args.nodes} nodes x {args.gpus} GPUs simulated, NUMBA_CPU_NAME="
        f"{args.cpu_name or '(host)'}, {args.rounds} round(s), median"
    )
    print(f"{'variant':<8} {'start -> first scored tick':>28} {'vs cold':>9}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<8} {median:>26.2f} s {cold / median:>8.1f}x")


if __name__ == "__main__":
    main()
