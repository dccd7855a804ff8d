"""`detector replay DUMP --events E --report-json R` gives the same report whichever of the
three dump formats holds the same data: OpenMetrics (promtool backfill input), Prometheus HTTP
API JSON matrices (several files), and `promtool tsdb dump` lines; gzipped or not."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from detector.cli.main import main
from detector.ingest.dumps.read import read_dump, write_openmetrics
from detector.ingest.events import write_events
from detector.model import Sample, XidEvent
from detector.series.index import SeriesIndex
from detector.sim import FailureSpec, Scenario, write_dump


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small simulated recording with one PCIe failure (precursor + XID 79)."""
    root = tmp_path_factory.mktemp("formats")
    scenario = Scenario(
        nodes=4,
        gpus=2,
        days=0.12,
        seed=11,
        failures=(
            FailureSpec(kind="pcie", node=1, gpu=1, at_s=0.09 * 86400, lead_s=1800.0, xid=79),
        ),
    )
    dump, events = root / "sim.om", root / "events.jsonl"
    write_dump(scenario, dump, events)
    return dump, events


def series_samples(
    dump: Path,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]]:
    index = SeriesIndex()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = defaultdict(
        list
    )
    for batch in read_dump(dump, index, cache=False):
        for t, c, v in zip(
            batch.times.tolist(), batch.columns.tolist(), batch.values.tolist(), strict=True
        ):
            info = index.infos[c]
            out[(info.metric, info.labels + info.context)].append((t, v))
    return out


def as_json_matrix(dump: Path, root: Path) -> list[Path]:
    """The same samples as two query_range responses (values as strings, as the API gives)."""
    results = [
        {
            "metric": {"__name__": name, **dict(labels)},
            "values": [[t, "NaN" if v != v else repr(v)] for t, v in points],
        }
        for (name, labels), points in series_samples(dump).items()
    ]
    paths = []
    for i, part in enumerate((results[::2], results[1::2])):
        path = root / f"query_range_{i}.json"
        body = {"status": "success", "data": {"resultType": "matrix", "result": part}}
        path.write_text(json.dumps(body))
        paths.append(path)
    return paths


def as_tsdb_dump(dump: Path, path: Path) -> Path:
    """The same samples as `promtool tsdb dump` prints them (series-ordered, milliseconds)."""
    with gzip.open(path, "wt") as out:
        for (name, labels), points in series_samples(dump).items():
            label_text = ", ".join(f'{k}="{v}"' for k, v in (("__name__", name), *labels))
            for t, v in points:
                out.write(f"{{{label_text}}} {v!r} {round(t * 1000)}\n")
    return path


def replay(paths: list[Path], events: Path, out: Path) -> dict[str, object]:
    argv = ["replay", *map(str, paths), "--events", str(events), "--report-json", str(out)]
    assert 0 == main([*argv, "--quiet"])
    report: dict[str, object] = json.loads(out.read_text())
    return report


def test_every_dump_format_gives_the_same_report(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    """OpenMetrics, JSON matrices and tsdb-dump of one recording replay to identical reports,
    in which the planted PCIe failure is caught before its XID."""
    dump, events = recorded
    reports = {
        "openmetrics": replay([dump], events, tmp_path / "om.json"),
        "json": replay(as_json_matrix(dump, tmp_path), events, tmp_path / "json.json"),
        "tsdb-dump": replay(
            [as_tsdb_dump(dump, tmp_path / "dump.txt.gz")], events, tmp_path / "td.json"
        ),
    }
    base = reports["openmetrics"]
    summary = base["summary"]
    assert isinstance(summary, dict)
    assert (1, 1, 1) == (
        summary["failures"],
        summary["detected"],
        summary["detected_before_failure"],
    )
    failures = base["failures"]
    assert isinstance(failures, list)
    assert ("node-02", "1", 79) == (failures[0]["node"], failures[0]["gpu"], failures[0]["xid"])
    for name, report in reports.items():
        assert base == report, name


def test_a_recording_scraped_by_address_replays_as_the_one_scraped_by_name(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    """A Prometheus that scraped the nodes by address names node-exporter's series by it
    (instance="10.0.0.2:9100") while dcgm-exporter's carry Hostname="node-02": replayed,
    each node is still one node under its host name, and an events file naming nodes by
    address matches them. The report is the one of the recording scraped by name."""
    dump, events = recorded
    by_address = tmp_path / "by_address.om"
    text = dump.read_text()
    for k in range(1, 5):
        text = text.replace(f'instance="node-0{k}:', f'instance="10.0.0.{k}:')
    assert 'instance="10.0.0.2:9100"' in text
    assert 'Hostname="node-02"' in text
    by_address.write_text(text)
    events_by_address = tmp_path / "events_by_address.jsonl"
    events_by_address.write_text(events.read_text().replace('"node-0', '"10.0.0.'))
    index = SeriesIndex()
    for _ in read_dump(by_address, index, cache=False):
        pass
    assert [f"node-0{k}" for k in range(1, 5)] == index.nodes()
    base = replay([dump], events, tmp_path / "name.json")
    assert base == replay([by_address], events, tmp_path / "address.json")
    assert base == replay([by_address], events_by_address, tmp_path / "both.json")


T_POD = 1_796_045_833.0


def test_a_replay_warns_of_gpus_named_by_their_exporters_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dcgm-exporter without host networking names its pod (Hostname = its scrape target's
    pod): a failure on the host cannot match those GPUs, and replay says why and what to
    add; with kube_pod_info in the dump the GPUs are the host's and nothing is said."""
    exporter = "nvidia-dcgm-exporter-cwbcm"
    labels = (("Hostname", exporter), ("gpu", "0"), ("instance", "10.244.1.7:9400"),
              ("pod", exporter))  # fmt: skip
    info = (("exported_pod", exporter), ("node", "gpu-05"), ("pod", "ksm-0"),
            ("pod_ip", "10.244.1.7"))  # fmt: skip
    samples = [
        Sample("DCGM_FI_DEV_GPU_TEMP", labels, 60.0 + k % 3, T_POD + 30.0 * k) for k in range(40)
    ]
    events = tmp_path / "events.jsonl"
    write_events(events, [XidEvent(T_POD + 600.0, "gpu-05", "0", 79)])
    bare, resolved = tmp_path / "bare.om", tmp_path / "resolved.om"
    write_openmetrics(bare, samples, {"DCGM_FI_DEV_GPU_TEMP": "gauge"})
    pod_info = [Sample("kube_pod_info", info, 1.0, s.timestamp) for s in samples]
    write_openmetrics(
        resolved, samples + pod_info, {"DCGM_FI_DEV_GPU_TEMP": "gauge", "kube_pod_info": "gauge"}
    )
    assert 0 == main(["replay", str(bare), "--events", str(events), "--quiet"])
    err = capsys.readouterr().err
    assert f"1 node(s) are named by a dcgm-exporter pod, not a node ({exporter}" in err
    assert "kube_pod_info" in err
    assert 0 == main(["replay", str(resolved), "--events", str(events), "--quiet"])
    assert "dcgm-exporter pod" not in capsys.readouterr().err


def test_a_dump_exported_with_the_selector_replays_as_the_whole_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`detector export-selector` prints {__name__=~"..."}; the simulated cluster's dump cut
    down to the series it selects (what `promtool tsdb dump --match` would export) gives the
    same report as the whole dump, with fewer series."""
    assert 0 == main(["export-selector"])
    selector = capsys.readouterr().out.strip()
    assert 0 == main(["export-selector", "--regex"])
    bare = capsys.readouterr().out.strip()
    assert f'{{__name__=~"{bare}"}}' == selector
    assert 0 == main(["export-selector", "--job", "dcgm-exporter", "--job", "ksm.monitoring"])
    only = capsys.readouterr().out.strip()  # a dot in a job name: \. in the regex, doubled
    assert f'{{__name__=~"{bare}",job=~"dcgm-exporter|ksm\\\\.monitoring"}}' == only
    pattern = re.compile(bare)
    whole, events = tmp_path / "whole.om.gz", tmp_path / "events.jsonl"
    argv = ["simulate", "--nodes", "4", "--gpus", "8", "--days", "0.2", "--seed", "7"]
    assert 0 == main([*argv, "--failures", "2", "--out", str(whole), "--events", str(events)])
    cut = tmp_path / "cut.om"
    dropped = 0
    with gzip.open(whole, "rt") as src, cut.open("w") as out:
        for line in src:
            words = line.split()
            name = words[2] if line.startswith("# ") and len(words) > 2 else words[0]
            name = re.split(r"[{ ]", name, maxsplit=1)[0]
            if line.startswith("# EOF") or pattern.fullmatch(name):
                out.write(line)
            else:
                dropped += not line.startswith("#")
    assert dropped > 0  # the simulated node-exporter has families no rule reads
    reports = []
    for dump in (whole, cut):
        report = tmp_path / f"{dump.name}.json"
        assert 0 == main(["replay", str(dump), "--events", str(events), "--report-json",
                          str(report), "--quiet"])  # fmt: skip
        reports.append(json.loads(report.read_text()))
    assert reports[0] == reports[1]
    assert reports[0]["summary"]["failures"] >= 1
