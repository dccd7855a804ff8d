"""Counters read alike whether their samples are named bare (`X`, dcgm-exporter's text) or
the strict OpenMetrics way (`# TYPE X counter`, `X_total` samples): the same simulated
cluster written both ways replays to the same signals, scores and alerts. One place decides
(rules.SignalCatalog and XidCatalog look a name up in both spellings), so every ingest path
gets it: the three dump formats here, and scrapes, which index their samples the same way."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Literal

import httpx
import pytest
from e2e.procs import promtool_backfill, require_tool

from detector.cli.main import main
from detector.config import (
    counter_family,
    export_pattern,
    load_config,
    load_signal_rules,
    load_xid_catalog,
    other_spelling,
)
from detector.ingest import Scraper, load_events
from detector.ingest.targets import make_target
from detector.loop import TickLoop
from detector.replay import dump_frames, run_replay
from detector.series import LabelRules, SeriesIndex
from detector.signals import SignalMap
from detector.sim import FailureSpec, Scenario, write_dump

SCENARIO = Scenario(
    nodes=4,
    gpus=2,
    days=0.12,
    seed=11,
    failures=(FailureSpec(kind="pcie", node=1, gpu=1, at_s=0.09 * 86400, lead_s=1800.0, xid=79),),
)
SPELLINGS: tuple[Literal["bare", "openmetrics", "exporters"], ...] = (
    "bare",
    "openmetrics",
    "exporters",
)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """The cluster written with every counter bare, as strict OpenMetrics, and as the
    simulated exporters name them (dcgm bare, node-exporter with _total)."""
    root = tmp_path_factory.mktemp("spellings")
    out: dict[str, tuple[Path, Path]] = {}
    for spelling in SPELLINGS:
        dump, events = root / f"{spelling}.om", root / f"{spelling}.events.jsonl"
        write_dump(SCENARIO, dump, events, counter_names=spelling)
        out[spelling] = (dump, events)
    return out


def _sample_names(dump: Path) -> set[str]:
    names = set()
    for line in dump.read_text().splitlines():
        if not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_the_dumps_spell_the_counters_as_asked(dumps: dict[str, tuple[Path, Path]]) -> None:
    """Strict: `# TYPE X counter` and only `X_total` samples; bare: no `_total` anywhere."""
    strict, bare = dumps["openmetrics"][0].read_text(), dumps["bare"][0].read_text()
    family = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
    assert f"# TYPE {family} counter\n{family}_total{{" in strict
    assert "# TYPE node_nfs_rpc_retransmissions counter\n" in strict
    assert "node_nfs_rpc_retransmissions{" in bare
    assert f"{family}{{" in bare
    assert {n for n in _sample_names(dumps["bare"][0]) if n.endswith("_total")} == set()
    strict_names = _sample_names(dumps["openmetrics"][0])
    assert family not in strict_names
    assert f"{family}_total" in strict_names


def _replay(dump: Path, events: Path, scores: Path) -> tuple[Counter[tuple[str, str, int]], str]:
    """(signal columns as (signal, node, gpu) counts, report JSON) of one replay."""
    config = load_config(None, {})
    index = SeriesIndex(LabelRules.from_config(config.labels))
    loop = TickLoop.from_config(config, index)
    pipeline = loop.pipeline
    result = run_replay(
        loop,
        dump_frames([dump], index, None),
        events=load_events(events),
        scores_out=scores,
    )
    layout = pipeline.signal_map.layout
    columns = Counter(
        (layout.signal_names[s], layout.node_names[n], g)
        for s, n, g in zip(layout.signal, layout.node, layout.gpu.tolist(), strict=True)
    )
    alerts = [(a.node, a.gpu, a.start, a.end, a.peak_score, a.signals) for a in result.alerts]
    report = json.dumps({"report": result.evaluation.to_json(), "alerts": alerts}, default=str)
    return columns, report


def test_strict_openmetrics_and_bare_counters_replay_alike(
    dumps: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """Bare, strict OpenMetrics and the exporters' own spelling give identical signal
    columns, identical scores (--scores-out, byte for byte) and identical alerts, in which
    the planted PCIe failure is caught by its own rule (pcie_replay, a counter)."""
    got = {}
    for spelling, (dump, events) in dumps.items():
        scores_csv = tmp_path / f"{spelling}.csv"
        columns, report = _replay(dump, events, scores_csv)
        got[spelling] = (columns, scores_csv.read_bytes(), report)
    columns, scores, report = got["bare"]
    signals = {signal for signal, _, _ in columns}
    assert {"pcie_replay", "energy_rate", "nvlink_bandwidth", "nfs_rpc_retransmissions"} <= signals
    assert {"nfs_op_rtt", "remapped_rows_correctable"} <= signals  # a ratio; a dcgm counter
    assert not any(name.endswith("_total") for name in signals)
    summary = json.loads(report)["report"]["summary"]
    assert (1, 1) == (summary["failures"], summary["detected_before_failure"])
    assert [] != json.loads(report)["alerts"]
    for spelling in ("openmetrics", "exporters"):
        assert columns == got[spelling][0], spelling
        assert scores == got[spelling][1], spelling
        assert report == got[spelling][2], spelling


def test_tsdb_dump_and_json_of_strict_counters_read_the_rules(tmp_path: Path) -> None:
    """The other two dump formats (no TYPE lines at all) of `X_total` samples feed the rules
    that name bare `X`, and bare samples feed the rules that name `X_total`."""
    t0 = 1_700_000_000
    points = [(t0 + 15 * i, float(i * i)) for i in range(6)]
    labels = 'gpu="0",Hostname="n1",UUID="GPU-1"'
    lines = []
    for name in ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total", "DCGM_FI_DEV_GPU_TEMP"):
        for t, v in points:
            lines.append(f'{{__name__="{name}", {labels}}} {v} {t * 1000}')
    for t, v in points:  # node-exporter's counter, bare
        lines.append(
            f'{{__name__="node_nfs_rpc_retransmissions", instance="n1:9100"}} {v} {t * 1000}'
        )
    tsdb = tmp_path / "dump.txt"
    tsdb.write_text("\n".join(lines) + "\n")
    results = [
        {
            "metric": {"__name__": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total", "gpu": "0",
                       "Hostname": "n1", "UUID": "GPU-1"},
            "values": [[t, repr(v)] for t, v in points],
        },
        {
            "metric": {"__name__": "node_nfs_rpc_retransmissions", "instance": "n1:9100"},
            "values": [[t, repr(v)] for t, v in points],
        },
    ]  # fmt: skip
    matrix = tmp_path / "query_range.json"
    body = {"status": "success", "data": {"resultType": "matrix", "result": results}}
    matrix.write_text(json.dumps(body))
    for dump in (tsdb, matrix):
        config = load_config(None, {})
        index = SeriesIndex(LabelRules.from_config(config.labels))
        loop = TickLoop.from_config(config, index)
        run_replay(loop, dump_frames([dump], index, None))
        names = set(loop.pipeline.signal_map.signal_names)
        assert {"pcie_replay", "nfs_rpc_retransmissions"} <= names, dump.name


def test_a_rule_matches_both_spellings_and_the_spelling_it_names_first() -> None:
    """`X` and `X_total` find the same rule from either side; a metric no rule names is the
    signal of its family; a rule naming one spelling exactly wins over one naming the other."""
    catalog = load_signal_rules()
    for metric, signal in (
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay"),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total", "pcie_replay"),
        ("node_nfs_rpc_retransmissions_total", "nfs_rpc_retransmissions"),
        ("node_nfs_rpc_retransmissions", "nfs_rpc_retransmissions"),
        ("node_edac_correctable_errors", "edac_correctable"),  # by pattern, bare
        ("node_infiniband_symbol_error_total", "ib_symbol_errors"),
    ):
        rule = catalog.rule_for(metric)
        assert (metric, signal) == (metric, rule.name if rule else None)
    assert "ignore" == catalog.classify("go_goroutines_total")
    assert "DCGM_FI_DEV_FOO_COUNTER" == catalog.default_signal_name("DCGM_FI_DEV_FOO_COUNTER_total")
    assert "DCGM_FI_DEV_FOO_COUNTER" == catalog.default_signal_name("DCGM_FI_DEV_FOO_COUNTER")
    both = catalog.model_validate(
        {
            "signals": [
                {"name": "bare", "metrics": ["x"], "transform": "level", "entity": "node"},
                {"name": "suffixed", "metrics": ["x_total"], "transform": "rate", "entity": "node"},
            ]
        }
    )
    rules = (both.rule_for("x"), both.rule_for("x_total"))
    assert ("bare", "suffixed") == tuple(rule.name if rule else None for rule in rules)
    xids = load_xid_catalog()
    assert "count" == xids.source_kind("DCGM_EXP_XID_ERRORS_COUNT_total")
    assert "gauge" == xids.source_kind("DCGM_FI_DEV_XID_ERRORS")
    assert None is xids.source_kind("DCGM_FI_DEV_GPU_TEMP")
    assert ("x_total", "x", "x") == (
        other_spelling("x"),
        other_spelling("x_total"),
        counter_family("x_total"),
    )


def test_the_export_selector_admits_both_spellings_of_every_counter() -> None:
    """Every name and pattern the rules read, and the XID sources, pass the selector both
    bare and with `_total`, so a strict OpenMetrics Prometheus exports what the rules read."""
    pattern = re.compile(export_pattern(load_signal_rules(), load_xid_catalog()))
    catalog = load_signal_rules()
    named = [m for rule in catalog.signals for m in (*rule.metrics, rule.denominator or "")]
    named += ["node_edac_csrow_correctable_errors_total", "node_infiniband_symbol_error_total"]
    named += ["DCGM_EXP_XID_ERRORS_COUNT"]
    for metric in filter(None, named):
        for spelled in (metric, other_spelling(metric)):
            assert (spelled, True) == (spelled, pattern.fullmatch(spelled) is not None)
    assert pattern.fullmatch("node_cpu_seconds_total") is None  # no rule reads it


@pytest.mark.tools
def test_promtool_backfills_the_strict_dump_and_its_tsdb_replays_alike(
    dumps: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """`promtool tsdb create-blocks-from openmetrics` accepts the strict dump; Prometheus
    stores `X_total` names, and its `promtool tsdb dump` replays to the bare dump's signals."""
    promtool = require_tool("promtool")
    strict, events = dumps["openmetrics"]
    done = promtool_backfill(strict, tmp_path / "tsdb")
    assert (0, "") == (done.returncode, done.stderr.strip())
    (tmp_path / "tsdb" / "wal").mkdir(exist_ok=True)  # promtool 2.42 dump wants a WAL dir
    dumped = subprocess.run(
        [promtool, "tsdb", "dump", str(tmp_path / "tsdb")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    back = tmp_path / "back.txt"
    back.write_text(dumped.stdout)
    assert '__name__="DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total"' in dumped.stdout
    columns, _ = _replay(back, events, tmp_path / "back.csv")
    assert _replay(*dumps["bare"], tmp_path / "bare.csv")[0] == columns


def _dcgm_page(node: str, count: int, *, strict: bool) -> str:
    """A GPU's counters as dcgm-exporter writes them (bare) or strict OpenMetrics."""
    suffix = "_total" if strict else ""
    labels = f'gpu="0",UUID="GPU-{node}",Hostname="{node}"'
    lines = []
    for family in ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_FOO_ERROR_COUNT"):
        lines += [f"# TYPE {family} counter", f"{family}{suffix}{{{labels}}} {count}"]
    lines += ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge", f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 40"]
    return "\n".join([*lines, "# EOF"] if strict else lines) + "\n"


async def test_a_cluster_scraped_in_both_spellings_has_one_signal_per_counter() -> None:
    """Scraped live, one node's exporter bare and the other's strict OpenMetrics: each counter
    is one signal over both nodes (its rule's, or for one no rule names its family), rated
    alike, so the two GPUs are peers."""
    counts = iter([100, 100, 130, 130])  # per scrape: gpu-01, gpu-02; 30 more 15 s later

    async def handler(request: httpx.Request) -> httpx.Response:
        strict = request.url.host == "gpu-02"
        return httpx.Response(200, text=_dcgm_page(request.url.host, next(counts), strict=strict))

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    targets = [make_target(f"http://{host}:9400/metrics") for host in ("gpu-01", "gpu-02")]
    index = SeriesIndex()
    signals = SignalMap(load_signal_rules(), index)
    async with Scraper(client, timeout_s=5.0, jitter_fraction=0.0) as scraper:
        for t in (1000.0, 1015.0):
            round_ = await asyncio.wait_for(scraper.scrape_all(targets, index, t), 30.0)
            out = signals.compute(t, round_.frame.values)
    rates = {
        (name, node, gpu): float(out[i])
        for i in range(len(signals))
        for name, node, gpu, series in [signals.column_names(i)]
        if series >= 0 and gpu is not None
    }
    assert {
        ("pcie_replay", "gpu-01", "0"): 2.0,
        ("pcie_replay", "gpu-02", "0"): 2.0,
        ("DCGM_FI_DEV_FOO_ERROR_COUNT", "gpu-01", "0"): 2.0,
        ("DCGM_FI_DEV_FOO_ERROR_COUNT", "gpu-02", "0"): 2.0,
        ("gpu_temp", "gpu-01", "0"): 40.0,
        ("gpu_temp", "gpu-02", "0"): 40.0,
    } == rates


def test_simulate_writes_strict_openmetrics_and_replay_finds_the_same_signals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`detector simulate --counter-names openmetrics` writes X_total counters; `detector
    replay` of it reports the same named signals found, and the same report, as of the
    exporters' own spelling."""
    simulate = ["simulate", "--nodes", "3", "--gpus", "2", "--days", "0.05", "--seed", "7"]
    found = {}
    for spelling in ("exporters", "openmetrics"):
        dump, events = tmp_path / f"{spelling}.om", tmp_path / f"{spelling}.jsonl"
        argv = [*simulate, "--counter-names", spelling, "--out", str(dump), "--events", str(events)]
        assert 0 == main(argv)
        report = tmp_path / f"{spelling}.json"
        argv = ["replay", str(dump), "--events", str(events), "--report-json", str(report)]
        capsys.readouterr()
        assert 0 == main([*argv, "--quiet"])
        lines = [line for line in capsys.readouterr().out.splitlines() if "signals:" in line]
        found[spelling] = (lines, json.loads(report.read_text()))
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total{" in (tmp_path / "openmetrics.om").read_text()
    assert 1 == len(found["exporters"][0])
    assert found["exporters"] == found["openmetrics"]
