"""labels.drop: series of the network devices and mounts that come and go with containers never
enter the series index, so a node whose pods churn does not grow the daemon's memory and tick."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from detector.cli.main import main
from detector.config.load import Config, load_config
from detector.config.schema import DEFAULT_DROP
from detector.errors import ConfigError
from detector.ingest.dumps.read import read_dump
from detector.ingest.dumps.writer import write_openmetrics
from detector.ingest.parse import parse_exposition, split_series
from detector.model import Frame, Sample
from detector.pipeline.build import build_pipeline
from detector.series import index as series_module
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules

REPO = Path(__file__).resolve().parent.parent
TARGET = (("instance", "10.0.0.1:9100"), ("job", "node"))
KUBELET = "/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected/kube-api-access"


def index_for(drop: dict[str, str] | None = None) -> SeriesIndex:
    labels = {} if drop is None else {"labels": {"drop": drop}}
    return SeriesIndex(LabelRules.from_config(Config.model_validate(labels).labels))


def churned_page(page: str, eth0: list[str], pod: int) -> bytes:
    """The real node-exporter page plus pod ``pod``'s veth (eth0's 27 lines, renamed) and its
    token volume, a tmpfs under the kubelet's pod directory (node_exporter's filesystem lines)."""
    veth = [ln.replace('device="eth0"', f'device="veth{pod:08x}"') for ln in eth0]
    mount = KUBELET.format(uid=f"{pod:08x}-2f4c")
    fs = [
        f'node_filesystem_avail_bytes{{device="tmpfs",fstype="tmpfs",mountpoint="{mount}"}} 1e9',
        'node_filesystem_avail_bytes{device="/dev/nvme0n1p1",fstype="ext4",mountpoint="/"} 4e11',
    ]
    return (page + "\n".join(veth + fs) + "\n").encode()


@pytest.mark.parametrize("drop", [None, {}])
def test_pods_that_come_and_go_add_no_series_unless_the_filter_is_off(
    real_data: Path, drop: dict[str, str] | None
) -> None:
    """40 scrapes of node-exporter's real page, each with a new pod's veth (27 series) and
    token mount: with the default labels.drop the index and the pipeline's signal columns stay
    as after the first scrape (the host's own devices and root filesystem in them); with
    ``drop: {}`` every pod adds its 28 series for good."""
    page = (real_data / "exporters/node_exporter/e2e-output.txt").read_text()
    eth0 = [ln for ln in page.splitlines() if 'device="eth0"' in ln and not ln.startswith("#")]
    assert 27 == len(eth0)
    index = index_for(drop)
    pipeline = build_pipeline(Config(), index)
    sizes, signals = [], []
    for k in range(40):
        exp = parse_exposition(churned_page(page, eth0, k), source="node-exporter")
        cols = index.columns(exp.keys, split_series, TARGET)
        frame = np.full(len(index), np.nan)
        kept = cols >= 0
        frame[cols[kept]] = np.asarray(exp.values)[kept]
        pipeline.step(Frame(1.7e9 + 15.0 * k, frame))
        sizes.append(len(index))
        signals.append(len(pipeline.signal_map.layout))
    metrics = {info.metric for info in index.infos}
    devices = {dict(info.labels).get("device") for info in index.infos}
    assert "eth0" in devices
    assert "node_filesystem_avail_bytes" in metrics
    if drop is None:
        assert [sizes[0]] * 40 == sizes
        assert [signals[0]] * 40 == signals
        assert 40 * 28 == index.dropped
        assert not any(str(d).startswith("veth") for d in devices)
    else:
        assert [sizes[0] + 28 * k for k in range(40)] == sizes
        assert signals[-1] > signals[0]
        assert 0 == index.dropped


def test_host_devices_mounts_and_nfs_exports_are_kept() -> None:
    """The defaults name container devices and mounts only: a host's NICs, bonds, InfiniBand
    ports, disks and its own mounts, and NFS mountstats (identified by export), stay."""
    index = index_for()
    kept = [
        'node_network_receive_errs_total{device="eth0"}',
        'node_network_receive_errs_total{device="bond0"}',
        'node_network_receive_errs_total{device="ens1f0np0"}',
        'node_network_receive_errs_total{device="docker0"}',
        'node_network_receive_errs_total{device="eno1"}',
        'node_network_receive_errs_total{device="enp1s0f0"}',
        'node_infiniband_port_data_received_bytes_total{device="mlx5_0",port="1"}',
        'node_disk_io_time_seconds_total{device="nvme0n1"}',
        'node_filesystem_avail_bytes{device="/dev/md0",mountpoint="/raid"}',
        'node_filesystem_avail_bytes{device="/dev/sda2",mountpoint="/var/lib/kubelet"}',
        'node_mountstats_nfs_operations_requests_total{export="fs:/ckpt",operation="WRITE"}',
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",device="nvidia0",Hostname="n1"}',
    ]
    dropped = [
        'node_network_receive_errs_total{device="veth3f2a1c"}',
        'node_network_receive_errs_total{device="cali5e2b8d0e1f2"}',
        'node_network_receive_errs_total{device="lxc9a8b7c6d5e4f"}',
        'node_network_receive_errs_total{device="0123456789abcde"}',
        'node_network_receive_errs_total{device="eni3f2a1c9b7d0"}',
        'node_network_receive_errs_total{device="gke5e2b8d0e1f2"}',
        'node_network_receive_errs_total{device="br-4c1d2e3f4a5b"}',
        'node_filesystem_avail_bytes{device="tmpfs",mountpoint="' + KUBELET.format(uid="u1") + '"}',
        'node_filesystem_avail_bytes{device="shm",mountpoint="/run/containerd/io.containerd'
        '.grpc.v1.cri/sandboxes/ab12/shm"}',
        'node_filesystem_avail_bytes{device="overlay",mountpoint="/var/lib/docker/overlay2/x/m"}',
    ]
    cols = index.columns(kept + dropped, split_series, TARGET)
    assert (cols[: len(kept)] >= 0).all()
    assert (cols[len(kept) :] == -1).all()
    assert len(kept) == len(index)
    assert len(dropped) == index.dropped
    # the next scrape of the same page: cached, none counted twice
    again = index.columns(kept + dropped, split_series, TARGET)
    assert cols.tolist() == again.tolist()
    assert len(dropped) == index.dropped


def test_the_raw_key_cache_is_cleared_before_churned_keys_pile_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Raw keys are cached, dropped ones too (a live pod's device is in every scrape), but a
    node that starts pods for months, or whose GPUs' pod label changes with every job, must
    not grow that cache: past two keys a series plus RAW_KEYS_SLACK it is cleared, and every
    key still maps as before (the dropped live ones dropped again)."""
    monkeypatch.setattr(series_module, "RAW_KEYS_SLACK", 100)
    index = index_for()
    host = ["node_load1", 'node_network_receive_errs_total{device="eth0"}']
    for pod in range(1000):
        keys = [
            *host,
            f'node_network_receive_errs_total{{device="veth{pod:06x}"}}',
            f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",pod="job-{pod}"}}',
        ]
        assert [0, 1, -1, 2] == index.columns(keys, split_series, TARGET).tolist()
        assert sum(map(len, index._by_raw.values())) <= 2 * 3 + 100 + len(keys)
    assert 3 == len(index)
    assert 1000 <= index.dropped


def test_a_metric_name_can_be_dropped_too() -> None:
    """``__name__`` names the metric, as in Prometheus relabelling: the Go runtime's series
    are kept out, the host's are not; other labels still apply beside it."""
    index = index_for({"__name__": "go_.*", "device": "veth.*"})
    keys = [
        'go_gc_duration_seconds{quantile="0.5"}',
        "go_goroutines",
        "node_load1",
        'node_network_receive_errs_total{device="veth1"}',
        'node_network_receive_errs_total{device="eth0"}',
    ]
    assert [-1, -1, 0, -1, 1] == index.columns(keys, split_series, TARGET).tolist()
    assert 3 == index.dropped


def test_a_dump_with_container_devices_replays_without_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded dump (promtool's OpenMetrics) with a veth beside eth0: read_dump's batches
    carry every eth0 sample and none of the veth's, the index holds no veth series, and the
    replay's summary counts the dropped one."""
    samples = [
        Sample("node_network_receive_bytes_total", (("device", d), ("instance", "n1")), v, t)
        for t in (1.7e9, 1.7e9 + 15, 1.7e9 + 30)
        for d, v in (("eth0", 100.0 + t % 7), ("veth12ab", 5.0))
    ]
    path = tmp_path / "dump.om"
    write_openmetrics(path, samples, {"node_network_receive_bytes_total": "counter"})
    index = index_for()
    batches = list(read_dump(path, index, cache=False))
    columns = np.concatenate([b.columns for b in batches])
    assert 1 == len(index)
    assert "eth0" == dict(index.infos[0].labels)["device"]
    assert [0, 0, 0] == columns.tolist()
    assert 1 == index.dropped
    # `detector replay` of it says so in its summary
    assert 0 == main(["replay", str(path)])
    assert "1 series (1 dropped by labels.drop)," in capsys.readouterr().out


def test_a_drop_pattern_that_is_not_a_regular_expression_is_a_config_error(
    tmp_path: Path,
) -> None:
    """The error names the setting, the label and the pattern; {} is a valid way to keep all."""
    path = tmp_path / "config.yaml"
    path.write_text("labels:\n  drop:\n    device: 'veth(.*'\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    message = str(err.value)
    assert "labels.drop" in message
    assert "device" in message
    assert "veth(.*" in message
    path.write_text("labels:\n  drop: {}\n")
    assert {} == load_config(path, env={}).labels.drop


def test_the_example_config_spells_out_the_default_drop_patterns() -> None:
    """deploy/config.example.yaml shows what labels.drop holds by default."""
    example = yaml.safe_load((REPO / "deploy" / "config.example.yaml").read_text())
    assert DEFAULT_DROP == example["labels"]["drop"]
