"""The live daemon's CPU per tick: ``Daemon.tick()`` against a simulated cluster over HTTP.

    python bench/daemon_bench.py                   # 63 nodes x 8 GPUs, 20 measured ticks
    python bench/daemon_bench.py --nodes 1000      # fleet mode, 1,000 nodes (a few minutes)

What is measured: the real daemon (``detector.daemon.Daemon``, built from a config whose static
targets are the simulator's dcgm-exporter and node-exporter pages, alerting with no
Alertmanager) runs ``await daemon.tick()`` once per simulated scrape interval: scrape every
target over loopback HTTP (httpx, asyncio), parse, map to the series index, build the frame,
``Pipeline.step``, alert state, accounting, export. The CPU time of this process
(``time.process_time``) is taken around each tick and around ``scrape_all`` and
``Pipeline.step`` inside it (thin timing wrappers on the instances); ``rest`` is the
remainder (alerts, accounting, per-signal evidence, exported metrics). Figures are medians over
``--ticks`` ticks after ``--warmup`` ticks (the first tick builds the series index and every
cache; scorers keep learning at full width during their own warm-up, so later ticks cost the
same).

The exporters run in a SEPARATE PROCESS, so their CPU is not counted. Before each tick the
benchmark asks it to render the next simulated step (= the scrape interval) for every node
with ``SimulatedCluster.exposition``, the very pages ``detector.simulate.serve`` answers, and
then serves those bytes from an asyncio HTTP/1.1 server with keep-alive (as the Go exporters
do; ``--no-keep-alive`` closes every connection, ``--gzip`` compresses). ``serve`` itself
(stdlib threads, HTTP/1.0, a page rendered per request) could not answer 2,000 requests in a
13.5 s timeout: most targets timed out on the first tick. The simulated pages are smaller than
a real node-exporter's (~160 samples instead of ~3,000: the simulator emits the families the
signal rules use); the table prints the samples actually scraped.

One more baseline (``--pool-ticks``, on by default up to 100 nodes): the same ticks with one
httpx client shared by every target, i.e. one connection pool, as the Scraper had before it
kept a client per target.

Split of the scrape (measured after the ticks on the pages of one tick, fetched once more):
``parse`` = ``parse_exposition`` on every body, ``columns`` = ``SeriesIndex.columns`` of the
parsed keys against the daemon's warm index; what is left of ``scrape_all`` is HTTP and
asyncio (httpx request/response handling, connection pool, event loop) and the frame.

Baselines, in the same run:
- prometheus_client's ``text_string_to_metric_families`` on the same bodies (parse only,
  every sample materialized): the obvious parser, the reference of bench/parse_bench.py;
- a naive per-series scoring loop: ``river.stats.EWMean`` + ``EWVar`` and a z-score per signal
  column per tick, in Python, timed on ``--river-columns`` columns and scaled to the pipeline's
  signal columns. It does a fraction of the pipeline's work (one statistic, no changepoint,
  peers, fusion, alerts), so the ratio understates the pipeline's advantage.

Goals (the "Live daemon" issue): 63 nodes <= 0.3 s CPU per tick; 1,000 nodes in fleet mode
<= 5 s CPU per 15 s tick.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import gzip
import multiprocessing
import multiprocessing.connection
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families
from river import stats

from detector.config.load import Config, load_config
from detector.ingest.parse import parse_exposition, split_series
from detector.logs import configure_logging
from detector.service.daemon import Daemon
from detector.sim import Scenario

T = TypeVar("T")
GOALS_S = {63: 0.3, 1000: 5.0}  # CPU seconds per tick, from the issue


# -- the exporters' process -----------------------------------------------------------------
_OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"


class _Pages:
    """The simulated cluster's pages of one tick, rendered ahead (child process)."""

    def __init__(self, scenario: Scenario, gzip_level: int) -> None:
        from detector.sim import SimulatedCluster

        self.cluster = SimulatedCluster(scenario)
        self.names = [scenario.node_name(n) for n in range(scenario.nodes)]
        self.frames = self.cluster.frames()
        self.gzip_level = gzip_level
        self.tick = -1
        self.frame: Any = None
        self.plain: dict[str, bytes] = {}
        self.packed: dict[str, bytes] = {}

    def render(self, tick: int) -> None:
        """Pages of simulated tick ``tick`` (>= the last one): what ``serve`` would answer."""
        while self.tick < tick:
            self.frame = next(self.frames)
            self.tick += 1
        t, values = self.frame
        plain = {}
        for name in self.names:
            dcgm, node = self.cluster.exposition(name, t, values)
            plain[f"/{name}/dcgm"], plain[f"/{name}/node"] = dcgm.encode(), node.encode()
        level = self.gzip_level
        self.packed = {k: gzip.compress(v, level) for k, v in plain.items()} if level else {}
        self.plain = plain

    def response(self, path: str, gzip_ok: bool, keep_alive: bool) -> bytes:
        body = self.plain.get(path)
        close = b"" if keep_alive else b"Connection: close\r\n"
        if body is None:
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n" + close + b"\r\n"
        encoding = b""
        if gzip_ok and self.packed:
            body, encoding = self.packed[path], b"Content-Encoding: gzip\r\n"
        head = b"%sContent-Length: %d\r\n%s%s\r\n" % (_OK, len(body), encoding, close)
        return head + body


def _serve_pages(
    conn: multiprocessing.connection.Connection,
    scenario: dict[str, Any],
    keep_alive: bool,
    gzip_level: int,
) -> None:
    """Child process: serve pre-rendered pages on loopback; each message ``k`` renders tick
    ``k`` and is echoed when done; EOF or None stops."""
    pages = _Pages(Scenario(**scenario), gzip_level)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readline()
                if not request:
                    break
                gzip_ok = False
                while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"accept-encoding" and b"gzip" in value:
                        gzip_ok = True
                parts = request.split()
                path = parts[1].decode() if len(parts) > 1 else ""
                writer.write(pages.response(path, gzip_ok, keep_alive))
                await writer.drain()
                if not keep_alive:
                    break
        except ConnectionError:
            pass
        finally:
            writer.close()

    def receive() -> Any:
        try:
            return conn.recv()
        except EOFError:
            return None

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        conn.send({n: (f"{base}/{n}/dcgm", f"{base}/{n}/node") for n in pages.names})
        loop = asyncio.get_running_loop()
        while (tick := await loop.run_in_executor(None, receive)) is not None:
            pages.render(tick)
            conn.send(tick)
        server.close()

    asyncio.run(main())


@dataclass
class ExporterProcess:
    """The simulated exporters in their own process; ``advance(k)`` shows tick ``k``."""

    scenario: Scenario
    keep_alive: bool = True
    gzip_level: int = 0
    process: Any = None
    conn: Any = None
    urls: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __enter__(self) -> ExporterProcess:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        fields = {k: getattr(self.scenario, k) for k in self.scenario.__dataclass_fields__}
        self.process = ctx.Process(
            target=_serve_pages,
            args=(child, fields, self.keep_alive, self.gzip_level),
            daemon=True,
        )
        self.process.start()
        child.close()
        self.urls = self._answer("start")
        return self

    def _answer(self, what: str) -> Any:
        if not self.conn.poll(300):
            self.__exit__(None, None, None)
            raise RuntimeError(f"the exporters' process did not {what}")
        return self.conn.recv()

    def advance(self, tick: int) -> None:
        """Render simulated tick ``tick`` (0 = the scenario's start) and serve it."""
        self.conn.send(tick)
        self._answer("render")

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(None)
            self.conn.close()
            self.conn = None
        if self.process is not None:
            self.process.join(15)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(5)


# -- the daemon ---------------------------------------------------------------------------
def daemon_config(urls: dict[str, tuple[str, str]], interval_s: float, folder: Path) -> Config:
    """The fleet-mode config of a daemon scraping every simulated exporter."""
    static = [
        {"url": url, "node": node, "kind": kind}
        for node, pair in urls.items()
        for url, kind in zip(pair, ("dcgm", "node"), strict=True)
    ]
    doc = {
        "mode": "fleet",
        "targets": {"static": static},
        # No jitter: it only delays the round's start; the timeout leaves the simulator
        # (one Python process rendering every page) time to answer 2,000 requests.
        "scrape": {
            "interval_s": interval_s,
            "timeout_s": interval_s * 0.9,
            "jitter_fraction": 0,
            "max_series_total": 10_000_000,  # a fleet sized by its memory, not the default
        },
        "alerts": {"alertmanager_urls": []},
        "kmsg": {"enabled": False},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(path, env={})


@dataclass
class TickCpu:
    total: list[float] = field(default_factory=list)
    scrape: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    scrape_wall: list[float] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)  # targets that failed, per measured tick

    @property
    def rest(self) -> list[float]:
        return [t - s - p for t, s, p in zip(self.total, self.scrape, self.step, strict=True)]


def _timed_async(
    cpu: list[float], wall: list[float], func: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start, began = time.process_time(), time.perf_counter()
        try:
            return await func(*args, **kwargs)
        finally:
            cpu.append(time.process_time() - start)
            wall.append(time.perf_counter() - began)

    return wrapper


def _timed(cpu: list[float], func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            cpu.append(time.process_time() - start)

    return wrapper


async def run_ticks(
    config: Config,
    sim: ExporterProcess,
    ticks: int,
    warmup: int,
    first: int = 0,
    client: httpx.AsyncClient | None = None,
    freeze: bool = False,
    strict: bool = True,
) -> tuple[TickCpu, Daemon]:
    """``warmup + ticks`` daemon ticks, one simulated step apart from step ``first`` on; CPU of
    the last ``ticks``. ``client``: one client for every target (the Scraper's fake seam)."""
    start = sim.scenario.start
    step = sim.scenario.step_s
    now = [start]
    daemon = Daemon(config, clock=lambda: now[0], client=client)
    cpu = TickCpu()
    scrape_cpu: list[float] = []
    step_cpu: list[float] = []
    daemon.scraper.scrape_all = _timed_async(  # type: ignore[method-assign,assignment]
        scrape_cpu, cpu.scrape_wall, daemon.scraper.scrape_all
    )
    daemon.pipeline.step = _timed(step_cpu, daemon.pipeline.step)  # type: ignore[method-assign]
    try:
        for k in range(first, first + warmup + ticks):
            if freeze and k == first + warmup:
                gc.freeze()  # the index, caches and pools built so far leave the GC's scans
            sim.advance(k)
            now[0] = start + k * step
            began, wall = time.process_time(), time.perf_counter()
            await daemon.tick()
            total, wall = time.process_time() - began, time.perf_counter() - wall
            errors = daemon.last_round.errors if daemon.last_round else []
            if errors and strict:
                raise RuntimeError(f"tick {k}: {len(errors)} scrape errors, first {errors[0]}")
            if k >= first + warmup:
                cpu.failed.append(len(errors))
                cpu.total.append(total)
                cpu.wall.append(wall)
        cpu.scrape, cpu.step = scrape_cpu[warmup:], step_cpu[warmup:]
        cpu.scrape_wall[:] = cpu.scrape_wall[warmup:]
    finally:
        await daemon.aclose()
        if client is not None:
            await client.aclose()
    return cpu, daemon


async def shared_client_ticks(
    config: Config, sim: ExporterProcess, ticks: int, warmup: int, first: int
) -> TickCpu:
    """The same ticks with ONE pooled httpx client for every target (the Scraper before it
    kept a client per target): the pool's O(connections) scans per request show here."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    client = httpx.AsyncClient(limits=limits, follow_redirects=False, trust_env=False)
    cpu, _ = await run_ticks(config, sim, ticks, warmup, first, client, strict=False)
    return cpu


def run_loop(coro: Awaitable[T]) -> T:
    """Run on uvloop when it is installed, as ``detector run`` does."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)  # type: ignore[arg-type]


# -- split of the scrape and the baselines -------------------------------------------------
def median_cpu(func: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        func()
        times.append(time.process_time() - start)
    return statistics.median(times)


def prometheus_client_parse(bodies: list[bytes]) -> int:
    samples = 0
    for body in bodies:
        for family in text_string_to_metric_families(body.decode()):
            samples += len(family.samples)
    return samples


def river_loop_per_tick(columns: int, ticks: int, seed: int = 0) -> float:
    """CPU seconds per tick of a per-series river loop over ``columns`` columns."""
    rng = np.random.default_rng(seed)
    x = (100.0 + rng.normal(size=(ticks, columns))).tolist()
    means = [stats.EWMean(fading_factor=0.01) for _ in range(columns)]
    variances = [stats.EWVar(fading_factor=0.01) for _ in range(columns)]
    z = [0.0] * columns
    start = time.process_time()
    for row in x:
        for i, value in enumerate(row):
            mean, var = means[i], variances[i]
            sd = var.get() ** 0.5
            z[i] = abs(value - mean.get()) / sd if sd > 0 else 0.0
            mean.update(value)
            var.update(value)
    return (time.process_time() - start) / ticks


def scrape_split(daemon: Daemon, repeat: int, pc_pages: int) -> dict[str, float]:
    """Parse and index CPU of one tick's pages, and prometheus_client on ``pc_pages`` of them
    scaled to all (it is slow)."""
    targets = daemon.targets.current()
    with httpx.Client(trust_env=False) as client:
        bodies = [client.get(t.url, timeout=60).content for t in targets]
    exps = [parse_exposition(b, t.url) for b, t in zip(bodies, targets, strict=True)]
    index = daemon.index
    out = {
        "pages": float(len(bodies)),
        "bytes": float(sum(map(len, bodies))),
        "samples": float(sum(len(e.keys) for e in exps)),
        "parse": median_cpu(
            lambda: [parse_exposition(b, t.url) for b, t in zip(bodies, targets, strict=True)],
            repeat,
        ),
        "columns": median_cpu(
            lambda: [
                index.columns(e.keys, split_series, t.labels)
                for e, t in zip(exps, targets, strict=True)
            ],
            repeat,
        ),
    }
    few = bodies[: max(1, min(pc_pages, len(bodies)))]
    out["prometheus_client"] = median_cpu(lambda: prometheus_client_parse(few), 3) * (
        len(bodies) / len(few)
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=63)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=20, help="measured ticks")
    parser.add_argument("--warmup", type=int, default=5, help="ticks before measuring")
    parser.add_argument("--interval", type=float, default=15.0, help="scrape interval, s")
    parser.add_argument("--river-columns", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--pool-ticks",
        type=int,
        default=None,
        help="ticks of the one-shared-client baseline (default 8 up to 100 nodes, else 0: "
        "its CPU grows with the square of the targets)",
    )
    parser.add_argument(
        "--gzip",
        type=int,
        default=0,
        metavar="LEVEL",
        help="serve gzip-compressed pages at this level (node-exporter compresses when "
        "asked; 0: plain, the default)",
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() after the warm-up ticks (what the daemon could do after its first "
        "tick): the long-lived index and caches leave the collector's full scans",
    )
    parser.add_argument(
        "--no-keep-alive",
        action="store_true",
        help="exporters close every connection (HTTP/1.0, the stdlib server's default)",
    )
    args = parser.parse_args()
    pool_ticks = args.pool_ticks if args.pool_ticks is not None else 8 * (args.nodes <= 100)
    pool_warmup = 2 if pool_ticks else 0
    # At least 30 steps: the simulator's workload smoothing (a 20-tick kernel) needs >= 20.
    steps = max(30, args.warmup + args.ticks + pool_warmup + pool_ticks + 2)
    scenario = Scenario(
        nodes=args.nodes,
        gpus=args.gpus,
        step_s=args.interval,
        days=steps * args.interval / 86_400,
        seed=args.seed,
        fault_trace=None,
        failure_count=0,
    )
    began = time.perf_counter()
    keep_alive = not args.no_keep_alive
    with (
        ExporterProcess(scenario, keep_alive, args.gzip) as sim,
        tempfile.TemporaryDirectory() as folder,
    ):
        config = daemon_config(sim.urls, args.interval, Path(folder))
        configure_logging(config.logging.level, config.logging.format)  # as ``detector run``
        cpu, daemon = run_loop(
            run_ticks(config, sim, args.ticks, args.warmup, freeze=args.gc_freeze)
        )
        split = scrape_split(daemon, repeat=5, pc_pages=min(126, 2 * args.nodes))
        pool: TickCpu | None = None
        if pool_ticks:
            first = args.warmup + args.ticks
            pool = run_loop(shared_client_ticks(config, sim, pool_ticks, pool_warmup, first))
    signal_columns = len(daemon.pipeline.signal_map)
    river_tick = river_loop_per_tick(min(args.river_columns, signal_columns), 5) * (
        signal_columns / min(args.river_columns, signal_columns)
    )

    def med(values: list[float]) -> float:
        return statistics.median(values)

    total, scrape, step, rest = med(cpu.total), med(cpu.scrape), med(cpu.step), med(cpu.rest)
    http = scrape - split["parse"] - split["columns"]
    print(
        f"{args.nodes} nodes x {args.gpus} GPUs, {int(split['pages'])} pages per tick "
        f"(exporters {'keep connections alive' if keep_alive else 'close connections'}"
        f"{', gzip' if args.gzip else ''}{', gc.freeze' if args.gc_freeze else ''}), "
        f"{int(split['samples']):,} samples ({split['bytes'] / 1e6:.1f} MB), "
        f"{len(daemon.index):,} series, {signal_columns:,} signal columns; "
        f"medians of {args.ticks} ticks after {args.warmup} warm-up ticks"
    )
    print(
        f"wall per tick (median): {med(cpu.wall):.3f} s, of which scrape_all "
        f"{med(cpu.scrape_wall):.3f} s (the simulator's process rendering pages included)"
    )
    print()
    print(f"| {'daemon tick part':<40} | {'CPU ms/tick':>11} | {'share':>6} |")
    print(f"|{'-' * 42}|{'-' * 13}|{'-' * 8}|")
    rows = [
        ("Daemon.tick() total", total),
        ("  scrape_all (HTTP + parse + frame)", scrape),
        ("    parse_exposition", split["parse"]),
        ("    SeriesIndex.columns", split["columns"]),
        ("    HTTP, asyncio, frame (remainder)", http),
        ("  Pipeline.step", step),
        ("  rest (alerts, accounting, export)", rest),
    ]
    for name, seconds in rows:
        print(f"| {name:<40} | {seconds * 1e3:>11.1f} | {seconds / total:>6.0%} |")
    print()
    print(f"| {'baseline (same run)':<40} | {'CPU ms/tick':>11} | {'ratio':>6} |")
    print(f"|{'-' * 42}|{'-' * 13}|{'-' * 8}|")
    pc = split["prometheus_client"]
    print(
        f"| {'prometheus_client parse, same pages':<40} | {pc * 1e3:>11.1f} | "
        f"{pc / split['parse']:>5.1f}x |  vs parse_exposition"
    )
    print(
        f"| {'river EWMean+EWVar loop, signal columns':<40} | {river_tick * 1e3:>11.1f} | "
        f"{river_tick / step:>5.1f}x |  vs Pipeline.step"
    )
    print(
        f"| {'prometheus_client + river loop':<40} | {(pc + river_tick) * 1e3:>11.1f} | "
        f"{(pc + river_tick) / total:>5.1f}x |  vs Daemon.tick()"
    )
    if pool is not None:
        shared = med(pool.scrape)
        print(
            f"| {'scrape_all, one shared httpx client':<40} | {shared * 1e3:>11.1f} | "
            f"{shared / scrape:>5.1f}x |  vs scrape_all (client per target), "
            f"{len(pool.scrape)} ticks, {max(pool.failed)} targets failed at worst"
        )
    goal = GOALS_S.get(args.nodes)
    print()
    if goal is not None:
        verdict = "met" if total <= goal else "NOT met"
        print(f"goal: <= {goal:g} s CPU per tick for {args.nodes} nodes: {total:.3f} s, {verdict}")
    print(f"benchmark wall time: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
