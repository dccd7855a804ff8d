"""CPU per 15 s tick and resident memory at real page sizes: an agent, and a fleet from raw
pages and from remote_write; nodes per core for each path.

    python bench/scale_bench.py                          # fleet measured at 50 and 200 nodes
    python bench/scale_bench.py --measure 100 400 --nodes 1000
    python bench/scale_bench.py --agent-only             # the agent alone: CPU, memory by stage

Pages (built from the repository's copies of the real exporters' output, with licences):
- node-exporter: the real page tests/data/exporters/node_exporter/e2e-output.txt (3,027
  samples), its text kept and its values moved each tick (counters and histograms grow,
  gauges jitter 1% a node and tick);
- dcgm-exporter: 8 GPUs x the 25 metrics of dcgm-exporter's dcp-metrics-included.csv, labelled
  as dcgm-exporter writes them (gpu, UUID, pci_bus_id, device, modelName, Hostname, driver
  version), error and XID fields at 0 (a non-zero XID gauge is a failure the loop would judge).

Paths, each run in its own spawned process, so its resident memory is its own (the pages and
requests are rendered by this parent process, outside the timed CPU, and handed over a pipe):
- agent: ``detector run`` in agent mode (``service.Daemon``, the node's dcgm-exporter on
  localhost:9400 and node-exporter on :9100); each tick is ``Daemon.tick()``: scrape, parse,
  series index, frame, ``TickLoop.step`` (scores, XIDs, alert episodes, the policy,
  accounting), export. The HTTP client is an ``httpx.MockTransport`` answering the rendered
  pages (the Scraper's client seam): socket I/O is left out (bench/daemon_bench.py measures
  loopback HTTP), httpx's request/response handling is in. Twice: with compiled kernels (the
  Helm chart; systemd with jit.conf) and interpreted (``NUMBA_DISABLE_JIT=1``: the systemd
  unit's ``MemoryDenyWriteExecute=yes`` default).
- fleet, raw pages: the same daemon in fleet mode scraping every node's two pages.
- fleet, remote_write: the daemon in fleet mode with ``remote_write`` on and nothing to
  scrape; before each tick the requests Prometheus would send for that scrape round
  (``--per-request`` samples each, snappy, the target labels ``instance``, ``job``, ``node``
  added as Prometheus adds them) go to ``RemoteWriteSource.receive`` as the server's
  /api/v1/write handler hands them (HTTP and auth left out), then ``Daemon.tick()``.
- fleet, remote_write, rules' metrics only: the same with only the series whose metric the
  rules read, as Prometheus sends them with the ``write_relabel_configs`` docs/deploy.md
  gives (``detector export-selector --regex``).
- fleet from agent summaries: the daemon in fleet mode scraping every node's agent's
  ``GET /summary`` (service/summary.py): the pages are the summary the measured agent served
  after its last tick (its node-level columns of named rules, its GPU scores and XID gauges),
  one per node under that node's name, values moved each tick like the exporters' gauges.
  Baseline: the raw-pages fleet at the same sizes (the CPU ratio is printed).

Figures: medians of ``--ticks`` ticks after ``--warmup`` (the first tick builds the index and
loads or compiles the kernels: printed apart), CPU time of the measured process
(``time.process_time``: the machine is shared). RSS: the process' resident memory after the
ticks, the last payload freed, a full collection and ``malloc_trim``. The garbage collector is
frozen after the first tick, as ``detector run`` does. Fleet figures at ``--nodes`` (and at
10,000) beyond the measured sizes are EXTRAPOLATED linearly from the two measured sizes (CPU
and memory per node = the slope between them) and printed as such.

Baselines, same run, same bytes: prometheus_client's ``text_string_to_metric_families`` on one
node's two pages each tick against ``parse_exposition`` on them; a plain snappy + protobuf
``WriteRequest.ParseFromString`` of the tick's requests against the remote_write ingest
(``receive`` + the tick's ``frame``).

Goals (issue 41): an agent at most 25 ms CPU per tick and 150 MB RSS; remote_write ingest at
least 1M samples/s per core; a fleet from agent summaries at least 10,000 nodes per core at a
15 s interval (judged at 10,000 nodes, extrapolated).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import ctypes
import gc
import multiprocessing
import multiprocessing.connection
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cramjam
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # this tree's detector, also in the spawned processes
    sys.path.insert(0, str(ROOT))
EXPORTERS = ROOT / "tests/data/exporters"  # copies, with licences
NODE_PAGE = EXPORTERS / "node_exporter/e2e-output.txt"
DCGM_FIELDS = EXPORTERS / "dcgm/dcp-metrics-included.csv"
GPUS = 8
T0 = 1_700_000_000.0
RW_HEADERS = {"content-encoding": "snappy", "content-type": "application/x-protobuf"}
AGENT_NODE = "gpu-node-0000"
AGENT_GOAL_MS, AGENT_GOAL_MB, INGEST_GOAL = 25.0, 150.0, 1_000_000.0
SUMMARY_GOAL = 10_000  # nodes a core, fleet from agent summaries
# dcgm fields whose non-zero value means an error or a failure: kept at 0 on a healthy fleet
_QUIET = ("XID", "ECC", "RETIRED", "REMAP", "VIOLATION", "REPLAY", "ERROR", "CRC")


# -- pages ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PageTemplate:
    """A page's text around its values: value ``i`` goes between ``parts[i]`` and
    ``parts[i + 1]``; ``base`` the values of the page it came from, ``grows`` which of them
    are counters (histogram and summary sums and counts too)."""

    parts: tuple[str, ...]
    base: np.ndarray
    grows: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.base.shape[0])

    def render(self, values: np.ndarray) -> bytes:
        texts = [repr(v) for v in values.tolist()]
        out = [self.parts[0]]
        for text, part in zip(texts, self.parts[1:], strict=True):
            out.append(text)
            out.append(part)
        return "".join(out).encode()

    def values(self, node: int, tick: int, seed: int = 0) -> np.ndarray:
        """The page's values of ``node`` at ``tick``: counters grow, gauges jitter 1%."""
        rng = np.random.default_rng((seed, node, tick))
        jitter = self.base * (1.0 + 0.01 * rng.standard_normal(self.samples))
        grown = self.base * (1.0 + 1e-3 * (node % 7 + tick)) + tick
        return np.where(self.grows, grown, jitter)


def template_of(text: str) -> PageTemplate:
    """A template of an exposition page whose sample lines are ``<series> <value>``."""
    parts: list[str] = []
    base: list[float] = []
    grows: list[bool] = []
    kinds: dict[str, str] = {}
    pending: list[str] = []
    for line in text.split("\n"):  # not splitlines(): label values may hold \x1c, \x85
        if line.startswith("#"):
            fields = line.split(maxsplit=3)
            if len(fields) == 4 and fields[1] == "TYPE":
                kinds[fields[2]] = fields[3].strip()
            pending.append(line + "\n")
            continue
        if not line.strip():
            continue
        series, _, value = line.rpartition(" ")
        if not series:
            raise ValueError(f"page line without a value: {line!r}")
        name = series.split("{", 1)[0]
        family = next(
            (name[: -len(s)] for s in ("_bucket", "_sum", "_count") if name.endswith(s)), name
        )
        kind = kinds.get(name) or kinds.get(family, "untyped")
        if parts:
            pending.insert(0, "\n")  # ends the previous sample's line
            parts[-1] += "".join(pending)
        else:
            parts.append("".join(pending))
        parts[-1] += series + " "
        parts.append("")
        pending = []
        base.append(float(value))
        grows.append(kind in ("counter", "histogram") or (kind == "summary" and name != family))
    parts[-1] += "\n" + "".join(pending)
    return PageTemplate(tuple(parts), np.array(base), np.array(grows))


def node_template() -> PageTemplate:
    """The real node-exporter page as a template (3,027 samples)."""
    return template_of(NODE_PAGE.read_text())


def dcgm_fields() -> list[tuple[str, str, str]]:
    """(field, Prometheus type, help) of every metric dcp-metrics-included.csv enables (its
    ``label`` rows, the driver version, become a label of every series)."""
    with DCGM_FIELDS.open() as f:
        rows = [r for r in csv.reader(f) if r and not r[0].lstrip().startswith("#")]
    fields = [(r[0].strip(), r[1].strip(), ",".join(r[2:]).strip()) for r in rows]
    return [f for f in fields if f[1] != "label"]


def dcgm_template(node: str, index: int) -> PageTemplate:
    """dcgm-exporter's page for ``node`` (the ``index``-th): 8 GPUs x every field."""
    rng = np.random.default_rng(index)
    lines = []
    for field, kind, help_ in dcgm_fields():
        lines += [f"# HELP {field} {help_}", f"# TYPE {field} {kind}"]
        quiet = any(word in field for word in _QUIET)
        base = 0.0 if quiet else float(rng.uniform(10, 1000))
        for g in range(GPUS):
            labels = (
                f'gpu="{g}",UUID="GPU-{index:08x}-{g:04x}-4b2c-9d1e-{g:012x}",'
                f'pci_bus_id="00000000:{0x1B + g:02X}:00.0",device="nvidia{g}",'
                f'modelName="NVIDIA B200",Hostname="{node}",DCGM_FI_DRIVER_VERSION="570.124.06"'
            )
            lines.append(f"{field}{{{labels}}} {base}")
    return template_of("\n".join(lines) + "\n")


def node_name(node: int) -> str:
    return f"gpu-node-{node:04d}"


def fleet_urls(node: int) -> tuple[str, str]:
    """The (dcgm, node) exporter URLs of fleet node ``node``."""
    host = f"10.1.{node // 250}.{node % 250}"
    return f"http://{host}:9400/metrics", f"http://{host}:9100/metrics"


def summary_url(node: int) -> str:
    """The URL of fleet node ``node``'s agent's summary."""
    return f"http://10.1.{node // 250}.{node % 250}:9108/summary"


# -- remote-write requests ------------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def remote_write_series(page: bytes, target: dict[str, str]) -> list[tuple[str, tuple[Any, ...]]]:
    """The series of a scraped page as Prometheus remote-writes them: its target labels added
    (an exporter's own label of the same name kept as ``exported_<name>``, honor_labels off)."""
    from detector.ingest.parse import parse_exposition, split_series

    out = []
    for key in parse_exposition(page, "bench page").keys:
        metric, labels = split_series(key)
        own = {(f"exported_{k}" if k in target else k): v for k, v in labels}
        out.append((metric, tuple(sorted((own | target).items()))))
    return out


class RequestEncoder:
    """Remote-write 1.0 requests of fixed series with new values: each series' wire bytes up to
    its sample's value are built once (protobuf), so a round costs a value and a timestamp a
    series. The bytes equal ``encode_write_request``'s for the same series (the test says so)."""

    def __init__(self, series: list[tuple[str, tuple[Any, ...]]]) -> None:
        from detector.ingest.remote_write import prompb_pb2 as pb

        self.heads: list[bytes] = []
        for metric, labels in series:
            pairs = sorted((("__name__", metric), *labels))
            wire = pb.TimeSeries(labels=[pb.Label(name=k, value=v) for k, v in pairs])
            self.heads.append(wire.SerializeToString())

    def requests(self, values: np.ndarray, stamp_ms: int, per_request: int) -> list[bytes]:
        stamp = b"\x10" + _varint(stamp_ms)
        sample_len = 9 + len(stamp)  # 0x09 + a double, then the timestamp
        packed = values.astype("<f8").tobytes()
        entries = []
        for j, head in enumerate(self.heads):
            body_len = len(head) + 2 + sample_len
            entries.append(
                b"\x0a"
                + _varint(body_len)
                + head
                + bytes((0x12, sample_len, 0x09))
                + packed[8 * j : 8 * j + 8]
                + stamp
            )
        return [
            bytes(cramjam.snappy.compress_raw(b"".join(entries[i : i + per_request])))
            for i in range(0, len(entries), per_request)
        ]


# -- what a path is fed, tick by tick (this process) -----------------------------------------
class Fleet:
    """Pages and requests of ``nodes`` nodes (node 0 is the agent's)."""

    def __init__(self, nodes: int, seed: int = 0) -> None:
        self.nodes = nodes
        self.seed = seed
        self.node = node_template()
        self.dcgm = [dcgm_template(node_name(n), n) for n in range(nodes)]
        self._encoders: dict[bool, list[RequestEncoder]] = {}
        self._masks: dict[bool, list[np.ndarray]] = {}
        self.summaries: list[PageTemplate] = []  # per node, once an agent served one

    def set_summary(self, text: str) -> None:
        """Every node's agent summary: the measured agent's, under the node's name."""
        self.summaries = [
            template_of(text.replace(AGENT_NODE, node_name(n))) for n in range(self.nodes)
        ]

    def summary_pages(self, tick: int) -> dict[str, bytes]:
        """URL -> body of every agent's summary of the tick."""
        return {
            summary_url(n): page.render(page.values(n, tick, self.seed))
            for n, page in enumerate(self.summaries)
        }

    def node_pages(self, node: int, tick: int) -> tuple[bytes, bytes]:
        """(dcgm, node) pages of ``node`` at ``tick``."""
        dcgm = self.dcgm[node]
        return (
            dcgm.render(dcgm.values(node, tick, self.seed)),
            self.node.render(self.node.values(node, tick, self.seed)),
        )

    def pages(self, tick: int, agent: bool = False) -> dict[str, bytes]:
        """URL -> body of every page of the tick (agent: node 0 on localhost)."""
        if agent:
            dcgm, node = self.node_pages(0, tick)
            return {"http://localhost:9400/metrics": dcgm, "http://localhost:9100/metrics": node}
        out = {}
        for n in range(self.nodes):
            urls = fleet_urls(n)
            out[urls[0]], out[urls[1]] = self.node_pages(n, tick)
        return out

    def encoders(self, selected: bool = False) -> list[RequestEncoder]:
        """Every node's encoder; ``selected``: only the series whose metric the rules read
        (what Prometheus' ``write_relabel_configs`` with ``detector export-selector --regex``
        keeps)."""
        if selected not in self._encoders:
            keep = rules_metrics() if selected else None
            encoders, masks = [], []
            for n in range(self.nodes):
                dcgm_url, node_url = fleet_urls(n)
                dcgm, node = self.node_pages(n, 0)
                name = node_name(n)
                series = remote_write_series(
                    dcgm, {"instance": dcgm_url.split("/")[2], "job": "dcgm-exporter", "node": name}
                ) + remote_write_series(
                    node, {"instance": node_url.split("/")[2], "job": "node-exporter", "node": name}
                )
                mask = np.array([keep is None or bool(keep.fullmatch(m)) for m, _ in series])
                encoders.append(RequestEncoder([s for s, k in zip(series, mask, strict=True) if k]))
                masks.append(mask)
            self._encoders[selected] = encoders
            self._masks[selected] = masks
        return self._encoders[selected]

    def requests(self, tick: int, per_request: int, selected: bool = False) -> list[bytes]:
        """The remote-write requests of the tick's scrape round, every node."""
        stamp_ms = int((T0 + 15.0 * tick) * 1000)
        out = []
        for n, encoder in enumerate(self.encoders(selected)):
            dcgm, node = self.dcgm[n], self.node
            values = np.concatenate(
                (dcgm.values(n, tick, self.seed), node.values(n, tick, self.seed))
            )
            out += encoder.requests(values[self._masks[selected][n]], stamp_ms, per_request)
        return out

    def prefix(self, nodes: int) -> Fleet:
        """The first ``nodes`` nodes (same pages, same requests)."""
        sub = Fleet.__new__(Fleet)
        sub.nodes, sub.seed, sub.node, sub.dcgm = nodes, self.seed, self.node, self.dcgm[:nodes]
        sub._encoders = {k: v[:nodes] for k, v in self._encoders.items()}
        sub._masks = {k: v[:nodes] for k, v in self._masks.items()}
        sub.summaries = self.summaries[:nodes]
        return sub


def rules_metrics() -> re.Pattern[str]:
    """The metric names the default rules read (``detector export-selector --regex``)."""
    from detector.config import Config, export_pattern, load_signal_rules, load_xid_catalog

    rules = Config().rules
    return re.compile(export_pattern(load_signal_rules(rules.signals), load_xid_catalog(rules.xid)))


# -- the measured process -------------------------------------------------------------------
def resident_mb() -> float:
    """Resident memory now, after a full collection and giving freed heap back (glibc)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def daemon_config(kind: str, nodes: int, interval_s: float, folder: Path) -> Any:
    from detector.config import load_config

    doc: dict[str, Any] = {
        "alerts": {"alertmanager_urls": []},
        "kmsg": {"enabled": False},
        "scrape": {"interval_s": interval_s, "timeout_s": interval_s * 0.9, "jitter_fraction": 0},
    }
    if kind == "agent":
        doc |= {"mode": "agent", "node_name": AGENT_NODE}
    else:
        doc["mode"] = "fleet"
        doc["scrape"]["max_series_total"] = 50_000_000  # sized by the machine, not the default
        static = []
        if kind == "pages":
            for n in range(nodes):
                for url, exporter in zip(fleet_urls(n), ("dcgm", "node"), strict=True):
                    static.append({"url": url, "node": node_name(n), "kind": exporter})
        elif kind == "summaries":
            static = [{"url": summary_url(n), "node": node_name(n)} for n in range(nodes)]
        else:
            doc["remote_write"] = {"enabled": True}
        doc["targets"] = {"static": static}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_config(path, env={})


def _timed(spent: list[float], func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            spent.append(time.process_time() - began)

    return wrapper


def _timed_async(spent: list[float], func: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.process_time()
        try:
            return await func(*args, **kwargs)
        finally:
            spent.append(time.process_time() - began)

    return wrapper


def measured_process(
    conn: multiprocessing.connection.Connection, kind: str, nodes: int, interval_s: float
) -> None:
    """Spawned: run the daemon of ``kind`` on what the parent sends each tick (None ends)."""
    import httpx

    from detector.logs import configure_logging
    from detector.service import Daemon

    configure_logging("warning")
    facts: dict[str, Any] = {"rss_imports_mb": resident_mb()}  # the libraries, no data yet
    pages: dict[str, bytes] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        body = pages[str(request.url)]
        return httpx.Response(200, content=body, headers={"content-type": "text/plain"})

    cpu: dict[str, list[float]] = {k: [] for k in ("tick", "scrape", "step", "receive", "frame")}

    async def drive() -> None:
        client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
        with tempfile.TemporaryDirectory() as folder:
            config = daemon_config(kind, nodes, interval_s, Path(folder))
        now = [T0]
        daemon = Daemon(config, clock=lambda: now[0], client=client)
        facts["rss_daemon_mb"] = resident_mb()  # + the pipeline built, nothing scraped
        scrape: list[float] = []
        step: list[float] = []
        frame: list[float] = []
        daemon.scraper.scrape_all = _timed_async(scrape, daemon.scraper.scrape_all)  # type: ignore[method-assign]
        daemon.pipeline.step = _timed(step, daemon.pipeline.step)  # type: ignore[method-assign]
        source = daemon.remote_write
        if source is not None:
            source.frame = _timed(frame, source.frame)  # type: ignore[method-assign]
        k = 0
        while (payload := conn.recv()) is not None:
            now[0] = T0 + k * interval_s
            began = time.process_time()
            if isinstance(payload, list):
                assert source is not None
                for body in payload:
                    source.receive(body, RW_HEADERS)
            else:
                pages.clear()
                pages.update(payload)
            received = time.process_time()
            await daemon.tick()
            ended = time.process_time()
            round_ = daemon.last_round
            if round_ is not None and round_.errors:
                raise RuntimeError(f"tick {k}: scrape errors, first {round_.errors[0]}")
            if k == 0:
                facts["first_tick_s"] = ended - began
                facts["rss_first_tick_mb"] = resident_mb()  # + index, kernels, state arrays
                gc.freeze()  # as run_daemon after its first tick
            else:
                cpu["tick"].append(ended - began)
                cpu["receive"].append(received - began)
                cpu["scrape"].append(scrape[-1])
                cpu["step"].append(step[-1])
                if frame:
                    cpu["frame"].append(frame[-1])
            k += 1
            payload = None
        pages.clear()
        facts["series"] = len(daemon.index)
        facts["signals"] = len(daemon.pipeline.signal_map)
        if kind == "agent":  # what a fleet reads of this agent (the summaries path's pages)
            facts["summary"] = daemon.summary.render()[0].decode()
        if source is not None:
            facts["rw_results"] = dict(source.stats.samples)
        await daemon.aclose()
        await client.aclose()

    asyncio.run(drive())
    facts["rss_mb"] = resident_mb()
    conn.send((cpu, facts))


def _baselines(payload: Any, cpu: dict[str, list[float]]) -> None:
    """The same run's baselines on the tick's bytes (this process, before sending them)."""
    from prometheus_client.parser import text_string_to_metric_families as prometheus_parse

    from detector.ingest.parse import parse_exposition
    from detector.ingest.remote_write import prompb_pb2 as pb

    if isinstance(payload, list):
        began = time.process_time()
        for body in payload:
            pb.WriteRequest().ParseFromString(bytes(cramjam.snappy.decompress_raw(body)))
        cpu["pb"].append(time.process_time() - began)
        return
    bodies = list(payload.values())[:2]  # one node's dcgm and node pages
    began = time.process_time()
    for body in bodies:
        parse_exposition(body, "bench")
    cpu["parse"].append(time.process_time() - began)
    began = time.process_time()
    for body in bodies:
        for family in prometheus_parse(body.decode()):
            _ = family.samples
    cpu["pc"].append(time.process_time() - began)


@dataclass
class Measured:
    kind: str
    label: str
    nodes: int
    samples: int  # a tick
    cpu: dict[str, float]  # medians, s
    facts: dict[str, Any]


def measure(
    fleet: Fleet, kind: str, nodes: int, args: argparse.Namespace, interpreted: bool = False
) -> Measured:
    """One path at one size in a spawned process; payloads rendered here, between ticks.
    ``interpreted``: numba's kernels run as plain Python there (``NUMBA_DISABLE_JIT=1``, what
    the systemd unit's ``MemoryDenyWriteExecute=yes`` leaves an agent)."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=measured_process, args=(child, kind, nodes, args.interval))
    saved = os.environ.get("NUMBA_DISABLE_JIT")
    if interpreted:
        os.environ["NUMBA_DISABLE_JIT"] = "1"  # the spawned interpreter reads it at start
    try:
        process.start()
    finally:
        if interpreted:
            os.environ.pop("NUMBA_DISABLE_JIT")
            if saved is not None:
                os.environ["NUMBA_DISABLE_JIT"] = saved
    child.close()
    samples = 0
    baselines: dict[str, list[float]] = {"parse": [], "pc": [], "pb": []}
    try:
        for tick in range(1 + args.warmup + args.ticks):
            if kind in ("remote_write", "rw_selected"):
                payload: Any = fleet.requests(tick, args.per_request, kind == "rw_selected")
            elif kind == "summaries":
                payload = fleet.summary_pages(tick)
            else:
                payload = fleet.pages(tick, agent=kind == "agent")
            if tick == 0:
                samples = _samples(fleet, nodes, kind)
            elif tick > args.warmup and kind != "summaries":  # its baseline: the raw pages'
                _baselines(payload, baselines)
            parent.send(payload)
            del payload
        parent.send(None)
        cpu, facts = parent.recv()
    finally:
        process.join(60)
        if process.is_alive():
            process.terminate()
    skip = args.warmup  # ticks after the first one still warming up
    medians = {k: statistics.median(v[skip:]) for k, v in cpu.items() if v[skip:]}
    medians |= {k: statistics.median(v) for k, v in baselines.items() if v}
    label = f"{kind} {nodes}" if kind != "agent" else "agent" + " interpreted" * interpreted
    return Measured(kind, label, nodes, samples, medians, facts)


def _samples(fleet: Fleet, nodes: int, kind: str) -> int:
    """Samples a tick of path ``kind`` at ``nodes`` nodes."""
    if kind == "rw_selected":
        return sum(int(mask.sum()) for mask in fleet._masks[True][:nodes])
    if kind == "summaries":
        return sum(page.samples for page in fleet.summaries[:nodes])
    per_node = fleet.node.samples + fleet.dcgm[0].samples
    return per_node * (1 if kind == "agent" else nodes)


# -- the table ------------------------------------------------------------------------------
def fit(a: Measured, b: Measured, key: str) -> tuple[float, float]:
    """(intercept, per node) of the line through two sizes' ``key``."""
    ya = a.cpu["tick"] if key == "cpu" else a.facts["rss_mb"]
    yb = b.cpu["tick"] if key == "cpu" else b.facts["rss_mb"]
    slope = (yb - ya) / (b.nodes - a.nodes)
    return ya - slope * a.nodes, slope


def print_report(
    agents: list[Measured], paths: dict[str, tuple[Measured, Measured]], args: argparse.Namespace
) -> None:
    interval = args.interval
    print()
    print(
        f"| {'path':<24} | {'nodes':>7} | {'':<12} | {'series':>10} | {'CPU ms/tick':>11} | "
        f"{'nodes/core':>10} | {'RSS MB':>8} | {'KB/series':>9} |"
    )
    print("|" + "|".join("-" * w for w in (26, 9, 14, 12, 13, 12, 10, 11)) + "|")

    def row(path: str, nodes: int, how: str, series: float, cpu_s: float, rss: float, kb: str):
        per_core = nodes * interval / cpu_s
        print(
            f"| {path:<24} | {nodes:>7,} | {how:<12} | {series:>10,.0f} | {cpu_s * 1e3:>11.1f} | "
            f"{per_core:>10,.0f} | {rss:>8,.0f} | {kb:>9} |"
        )

    for agent in agents:
        facts = agent.facts
        row(agent.label, 1, "measured", facts["series"], agent.cpu["tick"], facts["rss_mb"], "")
    sizes = sorted({args.nodes, 1000, 10_000})
    for kind, (a, b) in paths.items():
        label = {
            "pages": "fleet, raw pages",
            "remote_write": "fleet, remote_write",
            "rw_selected": "fleet, rw, rules' only",
            "summaries": "fleet, agent summaries",
        }[kind]
        per_series_kb = (
            (b.facts["rss_mb"] - a.facts["rss_mb"]) * 1024 / (b.facts["series"] - a.facts["series"])
        )
        for m in (a, b):
            row(
                label,
                m.nodes,
                "measured",
                m.facts["series"],
                m.cpu["tick"],
                m.facts["rss_mb"],
                f"{per_series_kb:.2f}",
            )
        cpu0, cpu_node = fit(a, b, "cpu")
        rss0, rss_node = fit(a, b, "rss")
        series_node = (b.facts["series"] - a.facts["series"]) / (b.nodes - a.nodes)
        for n in sizes:
            if n in (a.nodes, b.nodes):
                continue
            row(
                label,
                n,
                "EXTRAPOLATED",
                series_node * n,
                cpu0 + cpu_node * n,
                rss0 + rss_node * n,
                f"{per_series_kb:.2f}",
            )
    print(
        f"\nnodes/core = {interval:g} s interval / CPU per tick x nodes; EXTRAPOLATED rows: the "
        "line through the two measured sizes (CPU, RSS and series per node = its slope).\n"
        "fleet, rw, rules' only: remote_write after Prometheus' write_relabel_configs keeps only "
        "the metrics the rules read (detector export-selector --regex): "
        f"{paths['rw_selected'][0].samples // paths['rw_selected'][0].nodes:,} series a node.\n"
        "fleet, agent summaries: each node's agent's GET /summary, "
        f"{paths['summaries'][0].samples // paths['summaries'][0].nodes:,} samples a node."
    )

    print(
        f"\n| {'part (median CPU ms/tick)':<44} | "
        + " | ".join(f"{m.label:>18}" for m in _all(agents, paths))
        + " |"
    )
    print("|" + "-" * 46 + "|" + "|".join("-" * 20 for _ in _all(agents, paths)) + "|")
    for name, key in (
        ("Daemon.tick() (+ receive for remote_write)", "tick"),
        ("  RemoteWriteSource.receive, every request", "receive"),
        ("  scrape_all (HTTP client, parse, index)", "scrape"),
        ("  Pipeline.step", "step"),
    ):
        cells = [m.cpu.get(key, float("nan")) * 1e3 for m in _all(agents, paths)]
        print(f"| {name:<44} | " + " | ".join(f"{c:>18.1f}" for c in cells) + " |")
    cells = [m.facts["signals"] for m in _all(agents, paths)]
    print(f"| {'signal columns scored':<44} | " + " | ".join(f"{c:>18,}" for c in cells) + " |")
    cells = [m.facts["rss_imports_mb"] for m in _all(agents, paths)]
    print(
        f"| {'RSS after imports, before any data, MB':<44} | "
        + " | ".join(f"{c:>18.0f}" for c in cells)
        + " |"
    )
    cells = [m.facts["first_tick_s"] for m in _all(agents, paths)]
    print(
        f"| {'first tick (index built, kernels), s':<44} | "
        + " | ".join(f"{c:>18.2f}" for c in cells)
        + " |"
    )

    print(f"\n| {'baseline, same run and bytes':<52} | {'CPU ms':>8} | {'ratio':>24} |")
    print("|" + "-" * 54 + "|" + "-" * 10 + "|" + "-" * 26 + "|")
    pages = [m for m in _all(agents, paths) if "pc" in m.cpu]
    pc = statistics.median(m.cpu["pc"] for m in pages)
    parse = statistics.median(m.cpu["parse"] for m in pages)
    name = "prometheus_client parse, a node's two pages"
    print(f"| {name:<52} | {pc * 1e3:>8.2f} | {pc / parse:>5.1f}x parse_exposition's |")
    print(f"| {'parse_exposition, the same two pages':<52} | {parse * 1e3:>8.2f} | {'1.0x':>24} |")
    for raw, summaries in zip(paths["pages"], paths["summaries"], strict=True):
        ratio = raw.cpu["tick"] / summaries.cpu["tick"]
        print(
            f"| {f'fleet from agent summaries, {summaries.nodes} nodes, a tick':<52} | "
            f"{summaries.cpu['tick'] * 1e3:>8.1f} | {ratio:>6.1f}x less than raw pages' |"
        )
        print(
            f"| {f'fleet from raw pages, {raw.nodes} nodes, a tick':<52} | "
            f"{raw.cpu['tick'] * 1e3:>8.1f} | {'1.0x':>24} |"
        )
    a_rw, b_rw = paths["remote_write"]
    for m in (a_rw, b_rw):
        ingest = m.cpu["receive"] + m.cpu["frame"]
        rate, base = m.samples / ingest, m.samples / m.cpu["pb"]
        print(
            f"| {f'snappy + protobuf ParseFromString, {m.nodes} nodes':<52} | "
            f"{m.cpu['pb'] * 1e3:>8.1f} | {base:>13,.0f} samples/s |"
        )
        print(
            f"| {f'remote_write ingest (receive + frame), {m.nodes} nodes':<52} | "
            f"{ingest * 1e3:>8.1f} | {rate:>13,.0f} samples/s | "
            f"{rate / base:.2f}x protobuf"
        )
        results = m.facts.get("rw_results", {})
        if set(results) != {"accepted"}:  # anything else: the bench is wrong
            raise SystemExit(f"unexpected remote_write sample results: {results}")

    print_agent_goals(agents)
    rate = b_rw.samples / (b_rw.cpu["receive"] + b_rw.cpu["frame"])
    verdict = "met" if rate >= INGEST_GOAL else "NOT met"
    print(
        f"- remote_write ingest >= 1M samples/s a core: {rate:,.0f} at {b_rw.nodes} nodes, "
        f"{verdict}"
    )
    cpu0, cpu_node = fit(*paths["summaries"], "cpu")
    per_core = 10_000 * args.interval / (cpu0 + cpu_node * 10_000)
    verdict = "met" if per_core >= SUMMARY_GOAL else "NOT met"
    print(
        f"- fleet from agent summaries >= {SUMMARY_GOAL:,} nodes a core at {args.interval:g} s: "
        f"{per_core:,.0f} at 10,000 nodes (extrapolated), {verdict}"
    )


def print_agent_goals(agents: list[Measured]) -> None:
    """The agent's goals of issue 41 (CPU a tick, resident memory), each agent measured."""
    print("\ngoals (issue 41):")
    for agent in agents:
        agent_ms, agent_mb = agent.cpu["tick"] * 1e3, agent.facts["rss_mb"]
        verdict = "met" if agent_ms <= AGENT_GOAL_MS else "NOT met"
        print(f"- {agent.label} <= {AGENT_GOAL_MS:g} ms CPU a tick: {agent_ms:.1f} ms, {verdict}")
        verdict = "met" if agent_mb <= AGENT_GOAL_MB else "NOT met"
        print(f"- {agent.label} <= {AGENT_GOAL_MB:g} MB RSS: {agent_mb:.0f} MB, {verdict}")


def print_agents(agents: list[Measured]) -> None:
    """The agents' table (``--agent-only``): CPU a tick, and resident memory at each stage of
    the process' life, then the goals."""
    print(f"\n| {'agent':<44} | " + " | ".join(f"{m.label:>18}" for m in agents) + " |")
    print("|" + "-" * 46 + "|" + "|".join("-" * 20 for _ in agents) + "|")
    for name, key in (
        ("series", "series"),
        ("signal columns scored", "signals"),
        ("first tick (index built, kernels), s", "first_tick_s"),
        ("RSS after imports, MB", "rss_imports_mb"),
        ("RSS after Daemon(config), MB", "rss_daemon_mb"),
        ("RSS after the first tick, MB", "rss_first_tick_mb"),
        ("RSS after every tick, MB", "rss_mb"),
    ):
        cells = [m.facts[key] for m in agents]
        print(f"| {name:<44} | " + " | ".join(f"{c:>18,.1f}" for c in cells) + " |")
    cells = [m.cpu["tick"] * 1e3 for m in agents]
    name = "CPU a tick (Daemon.tick()), ms"
    print(f"| {name:<44} | " + " | ".join(f"{c:>18.1f}" for c in cells) + " |")
    print_agent_goals(agents)


def _all(agents: list[Measured], paths: dict[str, tuple[Measured, Measured]]) -> list[Measured]:
    return [*agents, *(m for pair in paths.values() for m in pair)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="fleet size to report (1000)")
    parser.add_argument(
        "--measure",
        type=int,
        nargs=2,
        default=[50, 200],
        metavar=("SMALL", "LARGE"),
        help="fleet sizes actually run (default 50 200); others are extrapolated from them",
    )
    parser.add_argument("--ticks", type=int, default=6, help="measured ticks (default 6)")
    parser.add_argument("--warmup", type=int, default=2, help="ticks after the first, unmeasured")
    parser.add_argument("--interval", type=float, default=15.0, help="scrape interval, s")
    parser.add_argument("--per-request", type=int, default=2000, help="remote-write batch")
    parser.add_argument(
        "--agent-only",
        action="store_true",
        help="measure only the agent (compiled and interpreted): its CPU a tick and memory",
    )
    args = parser.parse_args()
    small, large = sorted(args.measure)
    if small == large or small < 1:
        parser.error("--measure needs two different sizes >= 1")
    began = time.perf_counter()
    fleet = Fleet(1 if args.agent_only else large)
    node_samples = fleet.node.samples + fleet.dcgm[0].samples
    print(
        f"a node: node-exporter {fleet.node.samples:,} samples (real page) + dcgm-exporter "
        f"{fleet.dcgm[0].samples:,} ({GPUS} GPUs x {len(dcgm_fields())} fields) = "
        f"{node_samples:,} samples a scrape; {args.ticks} measured ticks after "
        f"{1 + args.warmup}, CPU time of each path's own process; python {sys.version.split()[0]}"
    )
    agents = [measure(fleet, "agent", 1, args), measure(fleet, "agent", 1, args, True)]
    print(f"agents measured ({time.perf_counter() - began:.0f} s)", flush=True)
    if args.agent_only:
        print_agents(agents)
        return
    paths: dict[str, tuple[Measured, Measured]] = {}
    fleet.encoders()  # every node's series wire bytes, once (the smaller size takes its share)
    fleet.encoders(selected=True)
    fleet.set_summary(agents[0].facts["summary"])
    for kind in ("pages", "remote_write", "rw_selected", "summaries"):
        pair = []
        for n in (small, large):
            sub = fleet if n == large else fleet.prefix(n)
            pair.append(measure(sub, kind, n, args))
            print(f"{kind} {n} nodes measured ({time.perf_counter() - began:.0f} s)", flush=True)
        paths[kind] = (pair[0], pair[1])
    print_report(agents, paths, args)
    print(f"\nbenchmark wall time: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
