"""SeriesIndex: stable columns, label normalization (node, gpu, renames, DCGM aliases, context
vs identity), target labels winning, and the raw-key cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from detector.ingest.parse import parse_exposition, split_series
from detector.model import Labels
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules, canonical_metric, host_names, pod_named_nodes

GPU_LABELS: Labels = (
    ("DCGM_FI_DRIVER_VERSION", "550.54.15"),
    ("Hostname", "gpu-node-01"),
    ("UUID", "GPU-1111"),
    ("device", "nvidia0"),
    ("gpu", "0"),
    ("modelName", "NVIDIA B200"),
    ("pci_bus_id", "00000000:18:00.0"),
)


def with_labels(base: Labels, **changes: str | None) -> Labels:
    labels = dict(base)
    for key, value in changes.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return tuple(labels.items())


def test_columns_are_stable_and_appended_in_order() -> None:
    """The same series always maps to its column; new series get the next one."""
    index = SeriesIndex()
    a = index.add("m", (("instance", "h1:9100"),))
    b = index.add("m", (("instance", "h2:9100"),))
    assert (0, 1) == (a, b)
    assert 0 == index.add("m", (("instance", "h1:9100"),))
    assert 2 == len(index)
    assert [0, 1] == [info.column for info in index.infos]


def test_node_comes_from_hostname_spellings_and_instance_host_part() -> None:
    """Hostname, hostname and instance's host part all name the node; spellings share a column."""
    index = SeriesIndex()
    c1 = index.add("DCGM_FI_DEV_GPU_TEMP", (("Hostname", "n1"), ("gpu", "0")))
    c2 = index.add("DCGM_FI_DEV_GPU_TEMP", (("gpu", "0"), ("hostname", "n1")))
    c3 = index.add("DCGM_FI_DEV_GPU_TEMP", (("gpu", "0"), ("instance", "n1:9400")))
    assert c1 == c2 == c3
    info = index.infos[c1]
    assert ("n1", "0") == (info.node, info.gpu)
    assert ["n1"] == index.nodes()


@pytest.mark.parametrize(
    ("instance", "node"),
    [("host-7:9100", "host-7"), ("10.0.0.5:9100", "10.0.0.5"), ("[::1]:9100", "::1"), ("h", "h")],
)
def test_instance_host_part_drops_the_port(instance: str, node: str) -> None:
    """host:port, IPv6 [addr]:port and a bare host all give the host."""
    index = SeriesIndex()
    assert node == index.infos[index.add("up", (("instance", instance),))].node


def test_uuid_spellings_share_a_column_and_are_context_on_gpu_series() -> None:
    """UUID and uuid (old namespace) are one label, kept as context of GPU series."""
    index = SeriesIndex()
    c1 = index.add("DCGM_FI_DEV_GPU_TEMP", GPU_LABELS)
    old = with_labels(GPU_LABELS, UUID=None, uuid="GPU-1111")
    assert c1 == index.add("DCGM_FI_DEV_GPU_TEMP", old)
    assert ("uuid", "GPU-1111") in index.infos[c1].context
    assert ("gpu", "0") in index.infos[c1].labels


def test_exported_pod_is_pod_and_a_pod_change_keeps_the_column() -> None:
    """Kubernetes context (pod, namespace, container; exported_* too) never splits a series."""
    index = SeriesIndex()
    first = with_labels(GPU_LABELS, exported_pod="train-0", exported_namespace="ml")
    c1 = index.add("DCGM_FI_DEV_POWER_USAGE", first)
    assert c1 == index.add("DCGM_FI_DEV_POWER_USAGE", with_labels(GPU_LABELS, pod="train-1"))
    assert c1 == index.add("DCGM_FI_DEV_POWER_USAGE", GPU_LABELS)
    context = dict(index.infos[c1].context)
    assert ("train-0", "ml") == (context["pod"], context["namespace"])
    assert 1 == len(index)


def test_a_slurm_job_change_keeps_the_column() -> None:
    """dcgm-exporter's HPC job mapping labels each GPU's series with its Slurm job (hpc_job,
    absent while the GPU is idle): context, so every job does not restart every series."""
    index = SeriesIndex()
    c1 = index.add("DCGM_FI_DEV_GPU_UTIL", with_labels(GPU_LABELS, hpc_job="4711"))
    assert c1 == index.add("DCGM_FI_DEV_GPU_UTIL", GPU_LABELS)
    assert c1 == index.add("DCGM_FI_DEV_GPU_UTIL", with_labels(GPU_LABELS, hpc_job="4712"))
    assert c1 == index.add("DCGM_FI_DEV_GPU_UTIL", with_labels(GPU_LABELS, hpc_user="ann"))
    assert 1 == len(index)


def test_host_names_of_scrape_addresses() -> None:
    """An address gets the host name dcgm-exporter gives beside it (Hostname) or
    node-exporter's uname (nodename); an address with two names (a push gateway's), a
    non-name ("localhost") or a name equal to the address gives none. An index with the
    names files node-exporter's series under the host name."""
    series = [
        ("node_load1", (("instance", "10.0.0.5:9100"), ("job", "node"))),
        (
            "DCGM_FI_DEV_GPU_TEMP",
            (("Hostname", "gpu-05"), ("gpu", "0"), ("instance", "10.0.0.5:9400")),
        ),
        ("node_uname_info", (("instance", "10.0.0.6:9100"), ("nodename", "gpu-06"))),
        ("node_uname_info", (("instance", "10.0.0.7:9100"), ("nodename", "localhost"))),
        ("push_metric", (("hostname", "a"), ("instance", "pushgw:9091"))),
        ("push_metric", (("hostname", "b"), ("instance", "pushgw:9091"))),
        ("node_load1", (("hostname", "gpu-08"), ("instance", "gpu-08:9100"))),
    ]
    hosts = host_names(series, LabelRules())
    assert {"10.0.0.5": "gpu-05", "10.0.0.6": "gpu-06"} == hosts
    index = SeriesIndex(hosts=hosts)
    columns = [index.add(name, labels) for name, labels in series]
    assert "gpu-05" == index.infos[columns[0]].node == index.infos[columns[1]].node
    assert "10.0.0.7" == index.infos[columns[3]].node


def test_kube_pod_info_files_a_pod_named_dcgm_exporter_under_its_node() -> None:
    """dcgm-exporter in Kubernetes without host networking: Hostname is its pod's name,
    instance its pod's IP (dcgm-exporter PR #129, issue #78). kube-state-metrics'
    kube_pod_info (its own pod and namespace moved to exported_* by honor_labels off) names
    the pod's node, so its GPUs join the node-exporter series of that node, and a restarted
    exporter pod (new name, new IP) is still that node."""
    dcgm = "DCGM_FI_DEV_GPU_TEMP"

    def exporter(pod: str, ip: str) -> Labels:
        return tuple(sorted({
            "Hostname": pod, "gpu": "0", "instance": f"{ip}:9400", "pod": pod,
            "exported_pod": "train-0", "namespace": "gpu-operator",
        }.items()))  # fmt: skip

    def pod_info(pod: str, ip: str, node: str) -> tuple[str, Labels]:
        labels = {
            "exported_pod": pod, "exported_namespace": "gpu-operator", "node": node,
            "pod_ip": ip, "host_ip": "10.0.0.5", "pod": "kube-state-metrics-7d9f",
            "instance": "10.244.9.9:8080",
        }  # fmt: skip
        return "kube_pod_info", tuple(sorted(labels.items()))

    series = [
        (dcgm, exporter("nvidia-dcgm-exporter-cwbcm", "10.244.1.7")),
        (dcgm, exporter("nvidia-dcgm-exporter-x2k9p", "10.244.1.8")),  # after a restart
        ("node_uname_info", (("instance", "10.0.0.5:9100"), ("nodename", "gpu-05"))),
        ("node_load1", (("instance", "10.0.0.5:9100"), ("job", "node"))),
        pod_info("nvidia-dcgm-exporter-cwbcm", "10.244.1.7", "gpu-05"),
        pod_info("nvidia-dcgm-exporter-x2k9p", "10.244.1.8", "gpu-05"),
        # a host-network pod has the node's IP; its node's Kubernetes name is not the host's
        # name here: the node-exporter's address keeps the name its uname gives
        pod_info("node-exporter-4xq2z", "10.0.0.5", "ip-10-0-0-5.internal"),
    ]
    hosts = host_names(series, LabelRules())
    index = SeriesIndex(hosts=hosts)
    columns = [index.add(name, labels) for name, labels in series[:4]]
    assert {"gpu-05"} == {index.infos[c].node for c in columns}
    assert "gpu-05" == hosts["10.0.0.5"]
    assert columns[0] == columns[1]  # the same GPU across the exporter's restart
    without = SeriesIndex(hosts=host_names(series[:4], LabelRules()))
    assert "nvidia-dcgm-exporter-cwbcm" == without.infos[without.add(*series[0])].node
    # what replay warns about: the pods left as nodes, none once kube_pod_info resolves them
    pods = ["nvidia-dcgm-exporter-cwbcm", "nvidia-dcgm-exporter-x2k9p"]
    assert pods == pod_named_nodes(series[:4], LabelRules(), without.hosts)
    assert [] == pod_named_nodes(series, LabelRules(), hosts)
    named = [(dcgm, (*exporter(pods[0], "10.244.1.7"), ("node", "gpu-05")))]  # a node label
    assert [] == pod_named_nodes(named, LabelRules(), {})


def test_a_nodes_scrape_health_series_are_one_per_job() -> None:
    """A Prometheus export has up / scrape_duration_seconds / scrape_samples_scraped per
    target: a node's dcgm-exporter and node-exporter jobs are two series each (one column,
    the value flipped between the two exporters' with whichever scrape came last in a tick).
    Without a job label (the daemon's static targets) the node's targets share the column,
    as before; other series keep job as context."""
    index = SeriesIndex()
    dcgm = (("instance", "10.0.0.5:9400"), ("job", "dcgm"), ("node", "gpu-05"))
    node = (("instance", "10.0.0.5:9100"), ("job", "node"), ("node", "gpu-05"))
    for metric in ("up", "scrape_duration_seconds", "scrape_samples_scraped"):
        assert index.add(metric, dcgm) != index.add(metric, node)
    bare = [(("instance", f"10.0.0.5:{port}"), ("node", "gpu-05")) for port in (9400, 9100)]
    assert index.add("up", bare[0]) == index.add("up", bare[1])
    assert index.add("node_load1", node) == index.add("node_load1", (*node[:1], ("job", "x"),
                                                                    node[2]))  # fmt: skip


def test_old_dcgm_namespace_folds_into_field_names() -> None:
    """dcgm_gpu_temp is DCGM_FI_DEV_GPU_TEMP, dcgm_xid_errors is DCGM_FI_DEV_XID_ERRORS."""
    assert "DCGM_FI_DEV_GPU_TEMP" == canonical_metric("dcgm_gpu_temp")
    assert "DCGM_FI_DEV_XID_ERRORS" == canonical_metric("dcgm_xid_errors")
    assert "DCGM_FI_DEV_FB_USED" == canonical_metric("dcgm_fb_used")
    assert "node_load1" == canonical_metric("node_load1")
    index = SeriesIndex()
    c1 = index.add("DCGM_FI_DEV_GPU_TEMP", GPU_LABELS)
    old = with_labels(GPU_LABELS, UUID=None, uuid="GPU-1111")
    assert c1 == index.add("dcgm_gpu_temp", old)
    assert "DCGM_FI_DEV_GPU_TEMP" == index.infos[c1].metric


def test_device_is_identity_on_non_gpu_series() -> None:
    """node_network_*{device="eth0"} and {device="lo"} are two series; on GPU series device is
    dcgm-exporter's description and does not split."""
    index = SeriesIndex()
    inst = ("instance", "h1:9100")
    eth0 = index.add("node_network_receive_bytes_total", (("device", "eth0"), inst))
    lo = index.add("node_network_receive_bytes_total", (("device", "lo"), inst))
    assert eth0 != lo
    c1 = index.add("DCGM_FI_DEV_GPU_TEMP", GPU_LABELS)
    assert c1 == index.add("DCGM_FI_DEV_GPU_TEMP", with_labels(GPU_LABELS, device="nvidia9"))


def test_numeric_node_label_is_a_numa_id_not_a_node_name() -> None:
    """node="0"/"1" (NUMA) keep two series on the instance's node."""
    index = SeriesIndex()
    inst = ("instance", "h1:9100")
    n0 = index.add("node_memory_numa_Active", (("node", "0"), inst))
    n1 = index.add("node_memory_numa_Active", (("node", "1"), inst))
    assert n0 != n1
    assert {"h1"} == {index.infos[n0].node, index.infos[n1].node}
    assert ("numa_node", "1") in index.infos[n1].labels


def test_drbd_peer_label_is_not_a_node_name() -> None:
    """node-exporter's DRBD series carry node="local"/"remote" (the replication peer): two
    series on the instance's node, and no address is renamed after the peer."""
    index = SeriesIndex()
    inst = ("instance", "server1:9100")
    name = "node_drbd_disk_state_is_up_to_date"
    local = index.add(name, (("device", "drbd1"), ("node", "local"), inst))
    remote = index.add(name, (("device", "drbd1"), ("node", "remote"), inst))
    assert local != remote
    assert {"server1"} == {index.infos[local].node, index.infos[remote].node}
    assert ("drbd_node", "remote") in index.infos[remote].labels
    assert {} == host_names([(name, (("node", "remote"), inst))], LabelRules())


def test_target_labels_win_and_exporter_labels_become_exported() -> None:
    """As Prometheus without honor_labels: the target's instance names the node, the exporter's
    own instance is kept as exported_instance context; labels the target does not set stay."""
    index = SeriesIndex()
    keys = ['up{instance="inside:1",job="x"}', "node_load1"]
    cols = index.columns(keys, split_series, (("instance", "n7:9100"),))
    up = index.infos[int(cols[0])]
    assert "n7" == up.node
    assert "inside:1" == dict(up.context)["exported_instance"]
    assert ("job", "x") in up.labels  # a scrape health series: one per job of the node
    assert "n7" == index.infos[int(cols[1])].node


def test_target_node_label_keeps_numa_series_apart() -> None:
    """A target that sets node= turns the exporter's NUMA node= into exported_node: still a
    NUMA id, still identity (three NUMA nodes must not share one column)."""
    index = SeriesIndex()
    keys = [f'node_memory_numa_Active{{node="{i}"}}' for i in range(3)]
    extra: Labels = (("instance", "h1:9100"), ("node", "h1"))
    cols = index.columns(keys, split_series, extra)
    assert 3 == len(set(cols.tolist()))
    assert {"h1"} == {index.infos[c].node for c in cols.tolist()}
    # the same series without the target's node label: the same column
    assert cols[1] == index.add("node_memory_numa_Active", (("instance", "h1:9100"), ("node", "1")))


def test_raw_keys_are_split_once_per_target() -> None:
    """A repeated raw key is a dict hit: the splitter runs once per (target labels, key)."""
    calls: list[str] = []

    def counting_split(key: str) -> tuple[str, Labels]:
        calls.append(key)
        return split_series(key)

    index = SeriesIndex()
    keys = ['m{gpu="0"}', 'm{gpu="1"}']
    a = ("instance", "a:1")
    b = ("instance", "b:1")
    first = index.columns(keys, counting_split, (a,))
    again = index.columns(keys, counting_split, (a,))
    other = index.columns(keys, counting_split, (b,))
    assert first.tolist() == again.tolist()
    assert set(first.tolist()).isdisjoint(other.tolist())
    assert 4 == len(calls)


def test_column_of_finds_known_series_only() -> None:
    """column_of normalizes like add but never appends."""
    index = SeriesIndex()
    c = index.add("DCGM_FI_DEV_GPU_TEMP", GPU_LABELS)
    assert c == index.column_of("dcgm_gpu_temp", with_labels(GPU_LABELS, pod="p"))
    assert index.column_of("DCGM_FI_DEV_GPU_TEMP", with_labels(GPU_LABELS, gpu="1")) is None
    assert 1 == len(index)


def test_extend_from_restores_columns_and_lookups() -> None:
    """A saved index restored in order maps the same series to the same columns."""
    saved = SeriesIndex()
    for g in range(3):
        saved.add("DCGM_FI_DEV_GPU_TEMP", with_labels(GPU_LABELS, gpu=str(g)))
    restored = SeriesIndex()
    restored.extend_from(saved.infos)
    assert 2 == restored.add("DCGM_FI_DEV_GPU_TEMP", with_labels(GPU_LABELS, gpu="2"))
    assert 3 == len(restored)
    with pytest.raises(ValueError, match="out of order"):
        SeriesIndex().extend_from(saved.infos[1:])


def test_real_node_exporter_payload_keeps_every_series_apart(real_data: Path) -> None:
    """node_exporter's e2e output (3k series: NUMA, devices, mounts) scraped as a target: no
    two distinct series share a column, and all land on the target's node."""
    text = (real_data / "exporters/node_exporter/e2e-output.txt").read_text()
    exp = parse_exposition(text, "e2e-output.txt")
    keys = list(dict.fromkeys(exp.keys))
    index = SeriesIndex()
    cols = index.columns(keys, split_series, (("instance", "h1:9100"), ("node", "h1")))
    assert len(keys) == len(set(cols.tolist()))
    assert ["h1"] == index.nodes()
