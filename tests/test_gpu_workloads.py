"""GPU peers on a node shared by several workloads: a GPU is compared only with the GPUs of
its own node that run the same job or pod (``labels.gpu_workload_labels``), in a live scrape
and in a dump replay."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from detector.cli.main import main
from detector.config.rules import load_signal_rules
from detector.config.schema import LabelsConfig
from detector.ingest.dumps.read import read_dump
from detector.ingest.parse import split_series
from detector.model import ColumnLayout, Labels, SeriesInfo
from detector.scorers.peers import PeerDeviation, peer_groups
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules, normalize, pod_owner, workload
from detector.signals.map import SignalMap

T0 = 1_767_000_000
STEP = 30


def test_the_gpus_own_pod_wins_over_the_scrape_targets_pod() -> None:
    """Prometheus without honor_labels keeps dcgm-exporter's pod label (the GPU's workload) as
    ``exported_pod`` and sets ``pod`` to the exporter's own pod; label order does not matter."""
    rules = LabelRules()
    base: Labels = (("gpu", "0"), ("Hostname", "n1"))
    for labels in (
        (*base, ("exported_pod", "train-7"), ("pod", "dcgm-exporter-abc")),
        (*base, ("pod", "dcgm-exporter-abc"), ("exported_pod", "train-7")),
    ):
        info = SeriesInfo(0, *normalize("DCGM_FI_DEV_GPU_TEMP", labels, rules))
        assert workload(info, rules) == "train"  # train-7's owner (pod_owner)
    idle = SeriesInfo(0, *normalize("DCGM_FI_DEV_GPU_TEMP", (*base, ("pod", "x")), rules))
    assert workload(idle, rules) == "x"  # the exporter's pod: the same for all idle GPUs


def test_the_first_configured_workload_label_wins_and_none_means_one_workload() -> None:
    labels: Labels = (("gpu", "0"), ("Hostname", "n1"), ("hpc_job", "4711"), ("pod", "p"))
    rules = LabelRules()
    assert workload(SeriesInfo(0, *normalize("m", labels, rules)), rules) == "4711"
    off = LabelRules.from_config(LabelsConfig(gpu_workload_labels=[]))
    assert workload(SeriesInfo(0, *normalize("m", labels, off)), off) == ""


def _key(gpu: int, pod: str | None) -> str:
    workload_label = f',exported_pod="{pod}"' if pod else ""
    return f'DCGM_FI_DEV_GPU_TEMP{{gpu="{gpu}",Hostname="n1"{workload_label}}}'


def test_a_scrape_notices_a_gpus_new_workload_and_its_return() -> None:
    index = SeriesIndex()
    target: Labels = (("instance", "n1:9400"), ("pod", "dcgm-exporter-abc"))

    def scrape(pod: str | None) -> int:
        (column,) = index.columns([_key(0, pod)], split_series, target).tolist()
        return int(column)

    column = scrape("train-a")
    assert index.recontexted == []  # a new series: mapped with its context
    assert scrape("train-a") == column
    assert index.recontexted == []
    history = []
    for pod in ("train-b", "train-b", None, "train-a", "train-a"):
        assert scrape(pod) == column  # one column through every workload
        history.append((list(index.recontexted), workload(index.infos[column], index.rules)))
        index.recontexted.clear()
    assert history == [
        ([column], "train-b"),
        ([], "train-b"),
        ([column], "dcgm-exporter-abc"),  # idle: the exporter's own pod, like its idle peers
        ([column], "train-a"),  # a key cached before: noticed all the same
        ([], "train-a"),
    ]


def test_a_scraped_gpu_moves_to_its_new_jobs_peers_in_the_same_tick() -> None:
    """Through the signal stage: the layout's teams follow the scraped keys' pods, and
    ``sync`` reports the changed layout so the pipeline regroups the peers before scoring."""
    index = SeriesIndex()
    signals = SignalMap(load_signal_rules(), index)
    target: Labels = (("instance", "n1:9400"),)

    def scrape(pods: list[str | None]) -> tuple[bool, list[list[int]]]:
        keys = [_key(gpu, pod) for gpu, pod in enumerate(pods)]
        index.columns(keys, split_series, target)
        moved = signals.sync(T0)
        layout = signals.layout
        temp = layout.signal == layout.signal_names.index("gpu_temp")
        teams: dict[int, list[int]] = {}
        for gpu, team in zip(layout.gpu[temp].tolist(), layout.team[temp].tolist(), strict=True):
            teams.setdefault(team, []).append(gpu)
        return moved, sorted(sorted(g) for g in teams.values())

    six, two = ["train"] * 6, ["serve", "serve"]
    assert scrape([*six, *two]) == (True, [[0, 1, 2, 3, 4, 5], [6, 7]])  # new columns
    assert scrape([*six, *two]) == (False, [[0, 1, 2, 3, 4, 5], [6, 7]])
    assert scrape([*six, None, None]) == (True, [[0, 1, 2, 3, 4, 5], [6, 7]])  # idle now
    assert scrape(["train"] * 8) == (True, [list(range(8))])  # the job took the whole node


def test_workloads_at_once_counts_jobs_running_together_not_one_after_another() -> None:
    """A job renamed on every GPU at once (a restart under a new name) is still one job at a
    time; two jobs side by side are two, and stay the most seen after one of them ends.
    ``workload_labels_seen`` names the label the jobs were read from (``replay`` advises it
    as cohort label)."""
    index = SeriesIndex()
    signals = SignalMap(load_signal_rules(), index)
    target: Labels = (("instance", "n1:9400"),)
    seen = []
    for pods in (["llm"] * 8, ["eval"] * 8, ["eval"] * 6 + ["serve"] * 2, ["eval"] * 8):
        index.columns([_key(gpu, pod) for gpu, pod in enumerate(pods)], split_series, target)
        signals.sync(T0)
        seen.append(signals.teams.workloads_at_once)
    assert seen == [1, 1, 2, 2]
    assert {"pod"} == signals.teams.workload_labels_seen  # exported_pod, normalized to pod


def _slurm_cohorts() -> tuple[SeriesIndex, SignalMap]:
    index = SeriesIndex(rules=LabelRules.from_config(LabelsConfig(cohort_labels=["hpc_job"])))
    return index, SignalMap(load_signal_rules(), index)


def _slurm_key(gpu: int, job: str | None) -> str:
    own = f',hpc_job="{job}"' if job else ""
    return f'DCGM_FI_DEV_GPU_TEMP{{gpu="{gpu}",Hostname="n1"{own}}}'


def test_a_node_follows_its_gpus_slurm_job_as_cohort_in_a_scrape() -> None:
    """``hpc_job`` is a context label: before, a node kept the cohort of the first job its
    series were seen in."""
    index, signals = _slurm_cohorts()
    cohorts = []
    for k, job in enumerate(("100", "200", "200", None, "100")):
        keys = [_slurm_key(gpu, job) for gpu in range(4)]
        columns = index.columns(keys, split_series, (("instance", "n1:9400"),))
        values = np.full(len(index), np.nan)
        values[columns] = 40.0
        signals.sync(T0 + STEP * k)
        signals.compute(T0 + STEP * k, values)
        cohorts.append({signals.cohort_names[c] for c in signals.layout.cohort.tolist()})
    # idle (no job label), the node stays in its last job's cohort, as for target labels
    assert cohorts == [{"100"}, {"200"}, {"200"}, {"200"}, {"100"}]


def test_nodes_whose_gpus_run_one_jobs_pods_share_a_cohort() -> None:
    """``cohort_labels: [pod]``: a node's cohort is its GPUs' pods' owner (``pod_owner``),
    so the nodes of one job are one cohort without a scheduler relabelling their targets,
    and a pod of the same job on the next run keeps the node where it is."""
    rules = LabelRules.from_config(LabelsConfig(cohort_labels=["pod"]))
    index = SeriesIndex(rules=rules)
    signals = SignalMap(load_signal_rules(), index)

    def scrape(k: int, pods: dict[str, str]) -> dict[str, str]:
        for node, pod in pods.items():
            keys = [
                f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",Hostname="{node}",pod="{pod}"}}' for g in range(4)
            ]
            index.columns(keys, split_series, (("instance", f"{node}:9400"),))
            # node-exporter's series carry its own pod (Kubernetes discovery): not a job
            own = (("instance", f"{node}:9100"), ("pod", "node-exporter-x7k2p"))
            index.columns(["node_load1"], split_series, own)
        values = np.full(len(index), 40.0)
        signals.sync(T0 + STEP * k)
        signals.compute(T0 + STEP * k, values)
        layout = signals.layout
        return {
            layout.node_names[n]: signals.cohort_names[c]
            for n, c in zip(layout.node.tolist(), layout.cohort.tolist(), strict=True)
        }

    first = {"n1": "llm-worker-0", "n2": "llm-worker-1", "n3": "eval-x7k2p"}
    assert scrape(0, first) == {"n1": "llm", "n2": "llm", "n3": "eval"}
    # the next run of the job places its ranks elsewhere: the same cohort
    assert scrape(1, {"n1": "llm-worker-1", "n2": "llm-worker-0", "n3": "eval-b9zq4"}) == {
        "n1": "llm",
        "n2": "llm",
        "n3": "eval",
    }
    assert not signals.sync(T0 + STEP * 2)  # nothing moved
    each = LabelRules.from_config(LabelsConfig(cohort_labels=["pod"], gpu_workload_pod_owner=False))
    index = SeriesIndex(rules=each)
    signals = SignalMap(load_signal_rules(), index)
    assert scrape(0, first) == first  # each pod a cohort of its own


def test_a_node_follows_its_gpus_slurm_job_as_cohort_in_a_dump(tmp_path: Path) -> None:
    plan = ("100", "100", "200", "200", "100")
    lines = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    lines += [f"{_slurm_key(0, job)} 40 {T0 + STEP * k}" for k, job in enumerate(plan)]
    (tmp_path / "d.om").write_text("\n".join([*lines, "# EOF", ""]))
    index, signals = _slurm_cohorts()
    for _ in read_dump(tmp_path / "d.om", index, cache=False):
        pass
    cohorts = []
    for k in range(len(plan)):
        signals.sync(T0 + STEP * k)
        cohorts.append({signals.cohort_names[c] for c in signals.layout.cohort.tolist()})
    assert cohorts == [{"100"}, {"100"}, {"200"}, {"200"}, {"100"}]


def test_a_dump_schedules_each_workload_change_at_the_sample_that_brings_it(
    tmp_path: Path,
) -> None:
    plan = {0: "a", 1: "a", 2: "a", 3: None, 4: None, 5: "b", 6: "b", 7: None}
    lines = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    for k, pod in plan.items():
        lines.append(f"{_key(0, pod)} 40 {T0 + STEP * k}")
        lines.append(f"{_key(1, 'a')} 40 {T0 + STEP * k}")  # one workload all along
    (tmp_path / "d.om").write_text("\n".join([*lines, "# EOF", ""]))
    index = SeriesIndex()
    for _ in read_dump(tmp_path / "d.om", index, cache=False):
        pass
    switching = {i.column for i in index.infos if i.gpu == "0"}
    steady = {i.column for i in index.infos if i.gpu == "1"}
    assert len(switching) == len(steady) == 1
    seen = []
    for k in plan:
        index.apply_contexts(T0 + STEP * k)
        flagged = set(index.recontexted)
        index.recontexted.clear()
        assert not flagged & steady
        (column,) = switching
        seen.append((bool(flagged), workload(index.infos[column], index.rules)))
    assert seen == [
        (True, "a"),  # its first sample says where it starts
        (False, "a"),
        (False, "a"),
        (True, ""),
        (False, ""),
        (True, "b"),
        (False, "b"),
        (True, ""),
    ]


def test_gpu_peer_groups_are_the_gpus_of_one_node_and_one_team() -> None:
    gpus = np.arange(8)
    layout = ColumnLayout(
        signal=np.zeros(9, dtype=np.int64),
        node=np.zeros(9, dtype=np.int64),
        gpu=np.append(gpus, -1),
        cohort=np.zeros(9, dtype=np.int64),
        direction=np.zeros(9, dtype=np.int64),
        signal_names=("power_usage",),
        node_names=("n1",),
        team=np.array([1, 1, 1, 1, 1, 1, 2, 2, 1]),
    )
    groups = [sorted(int(c) for c in row if c >= 0) for m in peer_groups(layout, 3) for row in m]
    assert groups == [[0, 1, 2, 3, 4, 5]]  # GPUs 6 and 7 alone in their job: no GPU peers
    one_team = dataclasses.replace(layout, team=None)
    groups = [sorted(int(c) for c in row if c >= 0) for m in peer_groups(one_team, 3) for row in m]
    assert groups == [list(range(8))]


# (low, high, noise) per metric: an idle GPU reads low, a busy one high
METRICS = {
    "DCGM_FI_DEV_POWER_USAGE": (90.0, 680.0, 8.0),
    "DCGM_FI_DEV_GPU_TEMP": (32.0, 68.0, 0.7),
    "DCGM_FI_DEV_SM_CLOCK": (345.0, 1965.0, 5.0),
    "DCGM_FI_PROF_SM_ACTIVE": (0.0, 0.92, 0.01),
    "DCGM_FI_DEV_FB_USED": (1.0, 150000.0, 50.0),
}
SHARED, SICK, SICK_FROM_H = "node-2", ("node-4", 3), 7.0


Workload = tuple[float, str | None]


def _workload(node: str, gpu: int, hours: float) -> Workload:
    """(load, pod): every node trains one job on all 8 GPUs, except the shared node, whose
    GPUs 6 and 7 idle, then serve another job, idle again, then a notebook."""
    if node != SHARED or gpu < 6:
        return 1.0, f"train-{node}"
    if 3 <= hours < 8:
        return 0.55, "serve-b"
    if 9 <= hours < 11:
        return 0.8, "notebook-c"
    return 0.0, None


def _shared_node_dump(
    path: Path,
    hours: float = 12.0,
    seed: int = 3,
    workload_of: Callable[[str, int, float], Workload] = _workload,
) -> None:
    """A Prometheus export of 6 nodes x 8 GPUs, dcgm-exporter with Kubernetes pod mapping
    scraped without honor_labels (the GPU's pod as ``exported_pod``); the training job dips
    together every 2 hours (a checkpoint); GPU 3 of node-4 loses 40% of its power and clocks
    from hour 7 (a lone deviant)."""
    rng = np.random.default_rng(seed)
    ticks = int(hours * 3600 / STEP)
    with path.open("w") as fh:
        for name, (low, high, noise) in METRICS.items():
            fh.write(f"# TYPE {name} gauge\n")
            for node in (f"node-{i}" for i in range(6)):
                for gpu in range(8):
                    labels = f'gpu="{gpu}",Hostname="{node}",pod="dcgm-exporter-{node}"'
                    for k in range(ticks):
                        t = k * STEP
                        load, pod = workload_of(node, gpu, t / 3600)
                        dip = 0.3 if load == 1.0 and t % 7200 < 300 else 1.0
                        sick = (node, gpu) == SICK and t >= SICK_FROM_H * 3600
                        weak = 0.6 if sick and name != "DCGM_FI_DEV_FB_USED" else 1.0
                        value = max(0.0, low + (high - low) * load * dip * weak)
                        value += rng.normal() * noise
                        own = f',exported_pod="{pod}"' if pod else ""
                        fh.write(f"{name}{{{labels}{own}}} {value:.6g} {T0 + t}\n")
        fh.write("# EOF\n")


def _alerts(tmp_path: Path, dump: Path, config: str) -> list[tuple[str, str | None]]:
    (tmp_path / "config.yaml").write_text(config)
    report = tmp_path / "report.json"
    args = ["replay", str(dump), "--config", str(tmp_path / "config.yaml")]
    assert main([*args, "--report-json", str(report)]) == 0
    return sorted({(a["node"], a["gpu"]) for a in json.loads(report.read_text())["alerts"]})


def test_a_node_shared_by_several_jobs_raises_no_gpu_peer_alert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "export.om"
    _shared_node_dump(dump)
    alerts = _alerts(tmp_path, dump, "{}\n")
    assert alerts == [("node-4", "3")]  # the lone deviant, and nothing on the shared node
    summary = capsys.readouterr().out  # the summary names the node it split
    assert "GPU workloads: 1 node ran GPUs in different jobs at once" in summary
    assert f"(labels.gpu_workload_labels): {SHARED}\n" in summary
    # Without workloads, the shared node's two GPUs of other jobs read as lone deviants of
    # the training job's six (the check that this test can fail).
    alerts = _alerts(tmp_path, dump, "labels:\n  gpu_workload_labels: []\n")
    assert ("node-4", "3") in alerts
    assert {gpu for node, gpu in alerts if node == SHARED} & {"6", "7"}


def _pod_per_gpu(node: str, gpu: int, hours: float) -> Workload:
    """One training job on every GPU, run as one pod per GPU (a rank each), named as a
    training operator names its workers; at hour 5 the next job takes every GPU."""
    job = "pretrain" if hours < 5 else "finetune"
    return 1.0, f"{job}-worker-{int(node.split('-')[1]) * 8 + gpu}"


def test_a_job_with_a_pod_per_gpu_keeps_its_gpu_peers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pods of one job are one workload (``pod_owner``), so the lone weak GPU stands out
    among its node's other ranks; with every pod its own workload each GPU is alone. The
    next job taking all GPUs of the nodes at once is no node shared by two jobs."""
    dump = tmp_path / "export.om"
    _shared_node_dump(dump, workload_of=_pod_per_gpu)
    assert _alerts(tmp_path, dump, "{}\n") == [("node-4", "3")]
    assert "GPU workloads" not in capsys.readouterr().out
    alone = _alerts(tmp_path, dump, "labels:\n  gpu_workload_pod_owner: false\n")
    assert ("node-4", "3") not in alone


def test_a_pods_workload_is_its_owner() -> None:
    """Kubernetes' pod names: a generated suffix (a Job's, a ReplicaSet's after its
    Deployment's pod-template hash), a StatefulSet's ordinal, a worker's index."""
    owners = {
        "train-worker-3": "train",  # a training operator's ranks (Kubeflow, MPI operator)
        "train-master-0": "train",
        "train-launcher": "train-launcher",  # an MPIJob's launcher: not a rank
        "llama-sft-x7k2p": "llama-sft",  # a Job's pod
        "llama-sft-2-x7k2p": "llama-sft",  # an indexed Job's pod
        "serve-7d9f8b6c4d-x7k2p": "serve",  # a Deployment's
        "vllm-0": "vllm",  # a StatefulSet's
        "vllm-0-1": "vllm",  # a LeaderWorkerSet's worker, beside its leader vllm-0
        "pretrain-workers-0-3-x7k2p": "pretrain-workers",  # a JobSet's
        "ray-gpu-group-x7k2p": "ray-gpu-group",  # a KubeRay worker group's
        "gpu-burn": "gpu-burn",  # nothing generated: the name is the workload
        "notebook-alice": "notebook-alice",
        "4711": "4711",  # a bare number has no suffix to strip
    }
    assert {pod: pod_owner(pod) for pod in owners} == owners
    rules = LabelRules()
    info = SeriesInfo(0, *normalize("m", (("gpu", "0"), ("pod", "train-worker-3")), rules))
    assert workload(info, rules) == "train"
    each = LabelRules.from_config(LabelsConfig(gpu_workload_pod_owner=False))
    assert workload(info, each) == "train-worker-3"
    # in its namespace: two teams' jobs of one name are two workloads
    spaced = [
        SeriesInfo(0, *normalize("m", (("gpu", "0"), ("pod", pod), ("namespace", ns)), rules))
        for pod, ns in (("train-worker-3", "team-a"), ("train-worker-0", "team-b"))
    ]
    assert [workload(i, rules) for i in spaced] == ["team-a/train", "team-b/train"]


def _gpu_layout(teams: list[int]) -> ColumnLayout:
    return ColumnLayout(
        signal=np.zeros(len(teams), dtype=np.int64),
        node=np.zeros(len(teams), dtype=np.int64),
        gpu=np.arange(len(teams)),
        cohort=np.zeros(len(teams), dtype=np.int64),
        direction=np.zeros(len(teams), dtype=np.int64),
        signal_names=("gpu_temp",),
        node_names=("n1",),
        team=np.array(teams),
    )


def test_gpus_that_change_job_together_stay_judged() -> None:
    """A node's next job puts all its GPUs under a new pod: none joins strangers, so none
    settles, and a GPU that runs 20 degrees hot in the new job stands out at once."""
    peers = PeerDeviation()
    rng = np.random.default_rng(6)
    first, second = _gpu_layout([0] * 8), _gpu_layout([3] * 8)
    scores = []
    for k in range(230):
        x = np.full(8, 60.0) + rng.normal(0, 0.5, 8)
        if k >= 200:
            x[3] += 20.0
        scores.append(float(peers.update(STEP * k, x, second if k >= 200 else first)[3]))
    assert max(scores[:200]) < 3.0
    assert max(scores[200:205]) > 6.0


def test_only_gpus_joining_strangers_settle_across_nodes() -> None:
    """Three nodes of 8 GPUs, two signals: on node 0 GPU 7 joins the idle team of GPUs 0-3,
    node 1 moves all its GPUs to a new job together, node 2 keeps its teams. Only node 0's
    GPU 7 settles (both its columns), whatever the other nodes' team ids."""
    teams_before = [0, 0, 0, 0, 1, 1, 1, 1] * 2 + [2] * 16 + [0, 0, 0, 0, 1, 1, 1, 1] * 2
    teams_after = list(teams_before)
    teams_after[7] = teams_after[15] = 0  # node 0, GPU 7: both its signals' columns
    teams_after[16:32] = [3] * 16  # node 1's whole next job

    def layout(teams: list[int]) -> ColumnLayout:
        return ColumnLayout(
            signal=np.tile(np.repeat(np.arange(2), 8), 3),
            node=np.repeat(np.arange(3), 16),
            gpu=np.tile(np.arange(8), 6),
            cohort=np.zeros(48, dtype=np.int64),
            direction=np.zeros(48, dtype=np.int64),
            signal_names=("gpu_temp", "power_usage"),
            node_names=("n0", "n1", "n2"),
            team=np.array(teams),
        )

    peers = PeerDeviation(team_settle_s=600.0)
    peers.update(0.0, np.full(48, 50.0), layout(teams_before))
    peers.update(STEP, np.full(48, 50.0), layout(teams_after))
    assert [7, 15] == np.flatnonzero(peers.settle_until > STEP).tolist()


def test_a_gpu_that_changes_job_settles_before_its_new_peers_judge_it() -> None:
    """GPU 7 leaves its busy job (reading 80) for the idle GPUs 0-3 (reading 40) and cools
    over 5 minutes: not judged while it settles (10 min), judged as usual afterwards. With no
    settling it would be a lone deviant at once (the check that this test can fail)."""

    before, after = _gpu_layout([0, 0, 0, 0, 1, 1, 1, 1]), _gpu_layout([0, 0, 0, 0, 1, 1, 1, 0])
    rng = np.random.default_rng(5)

    def run(settle_s: float, restart_at: int | None = None) -> tuple[float, float]:
        peers = PeerDeviation(team_settle_s=settle_s)
        moved_at = 200
        during, later = 0.0, 0.0
        for k in range(moved_at + 60):
            x = np.r_[np.full(4, 40.0), np.full(4, 80.0)] + rng.normal(0, 0.5, 8)
            if k >= moved_at:  # GPU 7 cools from 80 to 40 in 5 minutes (10 ticks)
                x[7] = 40.0 + 40.0 * max(0.0, 1.0 - (k - moved_at) / 10) + rng.normal(0, 0.5)
            if k == restart_at:  # a restart from the saved state, the layout rebuilt
                saved = peers.state_dict()
                peers = PeerDeviation(team_settle_s=settle_s)
                peers.load_state_dict(saved)
            score = peers.update(STEP * k, x, after if k >= moved_at else before)
            if moved_at <= k < moved_at + 20:
                during = max(during, float(score[7]))
            elif k >= moved_at + 25:
                later = max(later, float(score[7]))
        return during, later

    assert run(600.0)[0] == 0.0  # settling: not judged
    assert run(600.0)[1] < 3.0  # settled, cool: an ordinary member of the idle GPUs
    assert run(0.0)[0] > 6.0  # judged at once: the hot GPU beside the idle ones stands out
    assert run(600.0, restart_at=203)[0] == 0.0  # a restart mid-settle keeps it settling
    # a state saved before the settling existed loads with no column settling
    peers = PeerDeviation()
    peers.update(0.0, np.full(8, 40.0), before)
    old_state = {k: v for k, v in peers.state_dict().items() if k != "settle_until"}
    peers.load_state_dict(old_state)
    assert peers.settle_until.tolist() == [-np.inf] * 8
