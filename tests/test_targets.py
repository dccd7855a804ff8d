"""Targets: static, file_sd (parsing, reload on change, bad file keeps last good), agent mode,
and fleet sharding by cohort."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from detector.config.schema import Config, Shard
from detector.errors import ConfigError
from detector.ingest.targets import (
    Target,
    TargetSource,
    cohorts,
    make_target,
    parse_file_sd,
    shard_of,
    shard_targets,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def config(**data: Any) -> Config:
    return Config.model_validate(data)


def write_sd(path: Path, groups: object, mtime_ns: int | None = None) -> None:
    text = json.dumps(groups) if path.suffix == ".json" else yaml.safe_dump(groups)
    path.write_text(text)
    if mtime_ns is not None:  # a distinct mtime even on coarse file systems
        os.utime(path, ns=(mtime_ns, mtime_ns))


def test_make_target_completes_instance_and_node_from_the_url() -> None:
    """instance is host:port (default port by scheme), node the host unless given."""
    plain = make_target("http://gpu-07:9400/metrics")
    https = make_target("https://gpu-08/metrics", labels={"job": "node-exporter"})
    named = make_target("http://10.0.0.5:9100/metrics", node="gpu-09")
    assert ("gpu-07", "gpu-07:9400", "dcgm") == (plain.node, plain.instance, plain.kind)
    assert ("gpu-08", "gpu-08:443", "node") == (https.node, https.instance, https.kind)
    assert (("instance", "10.0.0.5:9100"), ("node", "gpu-09")) == named.labels
    assert "node" == named.kind


def test_node_label_names_the_node_over_the_address() -> None:
    """An explicit node label wins over the host part of the address."""
    target = make_target("http://10.0.0.5:9400/metrics", labels={"node": "gpu-11"})
    assert "gpu-11" == target.node


def test_file_sd_json_honours_metrics_path_scheme_and_params(tmp_path: Path) -> None:
    """__metrics_path__, __scheme__ and __param_* shape the URL; __ labels are dropped."""
    path = tmp_path / "sd.json"
    groups = [
        {
            "targets": ["gpu-01:9400", "gpu-02:9400"],
            "labels": {
                "job": "dcgm",
                "rack": "r1",
                "__metrics_path__": "/custom",
                "__scheme__": "https",
                "__param_module": "gpu",
            },
        },
        {"targets": ["gpu-01:9100"]},
    ]
    write_sd(path, groups)
    targets = parse_file_sd(path, path.read_text())
    assert [
        "https://gpu-01:9400/custom?module=gpu",
        "https://gpu-02:9400/custom?module=gpu",
        "http://gpu-01:9100/metrics",
    ] == [t.url for t in targets]
    assert (
        ("instance", "gpu-01:9400"),
        ("job", "dcgm"),
        ("node", "gpu-01"),
        ("rack", "r1"),
    ) == targets[0].labels
    assert ["dcgm", "dcgm", "node"] == [t.kind for t in targets]


def test_file_sd_yaml_reads_like_json(tmp_path: Path) -> None:
    """The same groups written as YAML give the same targets."""
    groups = [{"targets": ["a:9400"], "labels": {"node": "gpu-a"}}]
    write_sd(tmp_path / "sd.json", groups)
    write_sd(tmp_path / "sd.yaml", groups)
    from_json = parse_file_sd(tmp_path / "sd.json", (tmp_path / "sd.json").read_text())
    from_yaml = parse_file_sd(tmp_path / "sd.yaml", (tmp_path / "sd.yaml").read_text())
    assert from_json == from_yaml
    assert ["gpu-a"] == [t.node for t in from_yaml]


@pytest.mark.parametrize(
    ("groups", "where"),
    [
        ({"targets": ["a:1"]}, "must be a list of target groups"),
        ([{"targets": "a:1"}], r"\[0\]\.targets: must be a list"),
        ([{"targets": ["a:1"]}, {"targets": ["http://b:1/metrics"]}], r"\[1\]\.targets\[0\]"),
        ([{"targets": ["a:1"], "labels": {"rack": 7}}], r"\[0\]\.labels\.rack: .*strings"),
        ([{"targets": ["a:1"], "lables": {}}], r"\[0\]: unknown keys \['lables'\]"),
        ([{"targets": ["a:99999"]}], r"\[0\]\.targets\[0\]"),
    ],
)
def test_bad_file_sd_names_file_and_field(tmp_path: Path, groups: object, where: str) -> None:
    """Each malformed file_sd raises ConfigError naming the file and the group/field."""
    path = tmp_path / "sd.json"
    write_sd(path, groups)
    with pytest.raises(ConfigError, match=rf"sd\.json: .*{where}|sd\.json: {where}"):
        parse_file_sd(path, path.read_text())


def test_file_sd_reloads_on_change_when_refresh_is_due(tmp_path: Path) -> None:
    """A changed file is re-read once file_sd_refresh_s has passed, not before."""
    path = tmp_path / "sd.json"
    write_sd(path, [{"targets": ["a:9400"]}], mtime_ns=1_000_000_000)
    clock = FakeClock()
    source = TargetSource(
        config(targets={"file_sd": [str(path)], "file_sd_refresh_s": 30}), clock=clock
    )
    assert ["a"] == [t.node for t in source.current()]
    write_sd(path, [{"targets": ["a:9400", "b:9400"]}], mtime_ns=2_000_000_000)
    clock.now = 10.0
    assert ["a"] == [t.node for t in source.current()]
    clock.now = 31.0
    assert ["a", "b"] == [t.node for t in source.current()]


def test_bad_file_keeps_last_good_targets_and_logs_the_file(tmp_path: Path) -> None:
    """A broken or deleted file keeps its last good list; the error names the file; a fixed
    file is picked up again."""
    path = tmp_path / "sd.json"
    write_sd(path, [{"targets": ["a:9400"]}], mtime_ns=1_000_000_000)
    source = TargetSource(config(targets={"file_sd": [str(path)]}))
    assert ["a"] == [t.node for t in source.current()]
    path.write_text('[{"targets": ["b:9400"]')  # truncated mid-write
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    with capture_logs() as logs:
        source.refresh(force=True)
        source.refresh(force=True)  # the same problem is logged once
    assert ["a"] == [t.node for t in source.current()]
    errors = [e for e in logs if e["log_level"] == "error"]
    assert 1 == len(errors)
    assert str(path) == errors[0]["file"]
    assert "not valid JSON" in source.errors[path]
    path.unlink()
    source.refresh(force=True)
    assert ["a"] == [t.node for t in source.current()]
    write_sd(path, [{"targets": ["c:9400"]}], mtime_ns=3_000_000_000)
    assert source.refresh(force=True)
    assert ["c"] == [t.node for t in source.current()]
    assert {} == source.errors


def test_missing_file_at_start_gives_no_targets_and_an_error(tmp_path: Path) -> None:
    """A file_sd file that does not exist yet is an error, not a crash; static targets stay."""
    path = tmp_path / "later.json"
    static = [{"url": "http://s:9100/metrics"}]
    source = TargetSource(config(targets={"file_sd": [str(path)], "static": static}))
    assert ["s"] == [t.node for t in source.current()]
    assert path in source.errors


def test_agent_mode_scrapes_the_local_exporters_under_the_node_name() -> None:
    """Agent mode: localhost dcgm-exporter and node-exporter on the configured ports."""
    source = TargetSource(
        config(mode="agent", node_name="gpu-42", targets={"agent_ports": {"dcgm": 9500}})
    )
    assert [
        ("http://localhost:9500/metrics", "gpu-42", "dcgm"),
        ("http://localhost:9100/metrics", "gpu-42", "node"),
    ] == [(t.url, t.node, t.kind) for t in source.current()]


def test_same_url_listed_twice_is_scraped_once(tmp_path: Path) -> None:
    """A URL both static and in file_sd appears once, as first listed (static)."""
    path = tmp_path / "sd.json"
    write_sd(path, [{"targets": ["a:9400"], "labels": {"rack": "r9"}}])
    static = [{"url": "http://a:9400/metrics", "labels": {"rack": "r1"}}]
    source = TargetSource(config(targets={"file_sd": [str(path)], "static": static}))
    assert [("http://a:9400/metrics", "r1")] == [
        (t.url, dict(t.labels)["rack"]) for t in source.current()
    ]


def fleet(nodes: int, racks: int) -> list[Target]:
    out = []
    for n in range(nodes):
        labels = {"rack": f"r{n % racks}"}
        out.append(make_target(f"http://gpu-{n:03d}:9400/metrics", labels=labels))
        out.append(make_target(f"http://gpu-{n:03d}:9100/metrics"))  # no rack label here
    return out


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_are_disjoint_cover_all_and_keep_nodes_together(count: int) -> None:
    """Every target lands in exactly one shard; a node's exporters share a shard."""
    targets = fleet(40, racks=40)
    parts = [shard_targets(targets, Shard(index=i, count=count), []) for i in range(count)]
    urls = [t.url for part in parts for t in part]
    assert sorted(t.url for t in targets) == sorted(urls)
    assert len(urls) == len(set(urls))
    owner = {t.node: i for i, part in enumerate(parts) for t in part}
    assert all(owner[t.node] == i for i, part in enumerate(parts) for t in part)
    if count > 1:
        assert all(parts), "40 nodes hash onto every one of a few shards"


def test_cohort_label_keeps_peers_on_one_shard() -> None:
    """With rack as cohort label, all nodes of a rack (and both exporters) share a shard,
    even though only the dcgm target carries the label."""
    targets = fleet(60, racks=5)
    by_node = cohorts(targets, ["rack"])
    assert "rack=r3" == by_node["gpu-003"]
    parts = [shard_targets(targets, Shard(index=i, count=3), ["rack"]) for i in range(3)]
    rack_shard: dict[str, int] = {}
    for i, part in enumerate(parts):
        for t in part:
            assert rack_shard.setdefault(by_node[t.node], i) == i
    assert 5 == len(rack_shard)
    assert sum(map(len, parts)) == len(targets)


def test_shard_hash_is_stable() -> None:
    """The owner of a cohort is a fixed function of its name (crc32), the same everywhere."""
    assert 0xCBF43926 % 7 == shard_of("123456789", 7)  # the crc32 check value


def test_target_source_applies_the_configured_shard(tmp_path: Path) -> None:
    """Fleet mode with shard i/N yields exactly shard_targets of the full list."""
    path = tmp_path / "sd.json"
    write_sd(path, [{"targets": [f"gpu-{n:02d}:9400" for n in range(20)]}])
    full = TargetSource(config(targets={"file_sd": [str(path)]})).current()
    sharded = TargetSource(config(shard="1/3", targets={"file_sd": [str(path)]})).current()
    assert shard_targets(full, Shard(index=1, count=3), []) == sharded
    assert 0 < len(sharded) < len(full)
