"""How a series' raw labels are read: its identity, its node and GPU, its context.

``LabelRules`` say which labels name the node and the GPU, which renames apply, which labels are
context only (a GPU's job or pod, kept aside so that a new job does not start every series
afresh), which series are dropped, and which labels name cohorts and workloads.
``normalize`` turns one raw series into (metric, identity labels, node, gpu, context labels);
``workload``, ``pod_owner`` and ``grouping`` read who a series belongs to; ``host_names`` and
``pod_named_nodes`` resolve nodes named by a scrape address or by an exporter's pod. The series
index (series.py) keeps a column per normalized identity.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from ..config import LabelsConfig
from ..model import Labels, SeriesInfo

# Old dcgm-exporter namespace (dcgm_gpu_temp) -> field names (DCGM_FI_DEV_GPU_TEMP).
_DCGM_OLD_PREFIX = "dcgm_"
_DCGM_ALIASES = {
    "dcgm_xid_errors": "DCGM_FI_DEV_XID_ERRORS",
    "dcgm_fb_used": "DCGM_FI_DEV_FB_USED",
    "dcgm_fb_free": "DCGM_FI_DEV_FB_FREE",
}


@dataclass(frozen=True, slots=True)
class LabelRules:
    """How raw labels become identity: which labels name the node and the GPU, which renames
    apply, and which labels are context only (kept aside, not part of a series' identity)."""

    node_labels: tuple[str, ...] = ("node", "hostname", "Hostname", "instance")
    gpu_labels: tuple[str, ...] = ("gpu",)
    renames: tuple[tuple[str, str], ...] = (
        ("UUID", "uuid"),
        ("exported_pod", "pod"),
        ("exported_namespace", "namespace"),
        ("exported_container", "container"),
    )
    context_labels: frozenset[str] = frozenset(
        {
            "instance",
            "job",
            "Hostname",
            "hostname",
            "node",
            "pod",
            "namespace",
            "container",
            # dcgm-exporter's Slurm job mapping (--hpc-job-mapping-dir): a GPU's job, and
            # hpc_user in some builds; a new job must not start every series afresh
            "hpc_job",
            "hpc_user",
            "exported_job",
            "exported_instance",
        }
    )
    # exported_node is identity: a target that sets node= renames the exporter's own node label
    # (NUMA ids, drbd's local/remote), which is what tells those series apart.
    # Context only on GPU series (dcgm-exporter's descriptive labels); on other series, e.g.
    # node_network_*{device="eth0"}, they are identity.
    gpu_context_labels: frozenset[str] = frozenset(
        {"uuid", "pci_bus_id", "device", "modelName", "DCGM_FI_DRIVER_VERSION", "err_msg"}
    )
    # Series never indexed: (label, pattern) pairs, a series dropped when the value of one of
    # its labels (``__name__``: its metric name) matches the pattern in full (config
    # ``labels.drop``: the network devices and mounts that come and go with containers).
    drop: tuple[tuple[str, re.Pattern[str]], ...] = ()
    # Labels naming a node's cohort (the nodes its node-level signals are compared with), in
    # order of preference (config ``labels.cohort_labels``; signals.SignalMap reads them here);
    # empty: all nodes are one cohort.
    cohort_labels: tuple[str, ...] = ()
    # Labels naming a GPU's workload, first present wins (``workload``): its Slurm job, its pod.
    workload_labels: tuple[str, ...] = ("hpc_job", "pod")
    # A ``pod`` label names its owner's workload (``pod_owner``): the per-GPU pods of one job
    # are one workload (config ``labels.gpu_workload_pod_owner``); False: each pod its own.
    pod_owner: bool = True
    # The signal (rules/signals.yaml) whose co-movement tells apart the jobs of a node's GPUs
    # that no workload label names (gpu_comovement.py; config
    # ``labels.gpu_workload_comovement``); None: all such GPUs of a node are one team.
    workload_comovement: str | None = "power_usage"
    # The signal (its utilization, %) that tells a node's unlabelled GPUs at rest from its
    # working ones (gpu_activity.py; config ``labels.gpu_activity_signal``); None: off.
    activity_signal: str | None = "gpu_util"

    @property
    def relabel(self) -> frozenset[str]:
        """The cohort labels, which a scheduler rewrites on a node's targets with each job: a
        scraped series that differs from a known one only in them is that series, relabelled
        (SeriesIndex.columns)."""
        return frozenset(self.cohort_labels)

    @classmethod
    def from_config(cls, labels: LabelsConfig) -> LabelRules:
        """The rules of a config's ``labels`` section."""
        return cls(
            node_labels=tuple(labels.node_labels),
            gpu_labels=tuple(labels.gpu_labels),
            drop=tuple((label, re.compile(pattern)) for label, pattern in labels.drop.items()),
            cohort_labels=tuple(labels.cohort_labels),
            workload_labels=tuple(labels.gpu_workload_labels),
            pod_owner=labels.gpu_workload_pod_owner,
            workload_comovement=labels.gpu_workload_comovement,
            activity_signal=labels.gpu_activity_signal,
        )

    def dropped(self, name: str, labels: Labels) -> bool:
        """Whether ``drop`` keeps the series ``name{labels}`` out of the index."""
        if not self.drop:
            return False
        raw = dict(labels)
        raw["__name__"] = name
        return any(
            (value := raw.get(label)) is not None and pattern.fullmatch(value) is not None
            for label, pattern in self.drop
        )


def without(labels: Labels, names: frozenset[str] | tuple[str, ...]) -> Labels:
    """``labels`` but those named in ``names``."""
    return tuple(kv for kv in labels if kv[0] not in names)


# A scraper's own series per target (Prometheus writes them, and so does the daemon). Their
# ``job`` is identity: a node's dcgm-exporter and node-exporter jobs are two series, not one
# column whose value would flip between the two exporters' with whichever scrape came last in
# a tick (a Prometheus export's ``scrape_samples_scraped``: 100 and 160, a changepoint each
# time). Targets without a job (the daemon's static ones) still share the column; the scraper
# writes the worst case of them there (ingest/scrape.py).
SCRAPE_HEALTH_METRICS = ("up", "scrape_duration_seconds", "scrape_samples_scraped")

# normalize's result: (metric, identity labels, node, gpu, context labels)
Normalized = tuple[str, Labels, str, str, Labels]


def canonical_metric(name: str) -> str:
    """The metric name under which a series is scored (DCGM field aliases folded)."""
    alias = _DCGM_ALIASES.get(name)
    if alias is not None:
        return alias
    if name.startswith(_DCGM_OLD_PREFIX):
        return "DCGM_FI_DEV_" + name[len(_DCGM_OLD_PREFIX) :].upper()
    return name


def _host_part(instance: str) -> str:
    if instance.startswith("["):  # [::1]:9100
        return instance[1 : instance.find("]")] if "]" in instance else instance
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() else instance


def _renamed(labels: Labels, rules: LabelRules) -> dict[str, str]:
    """``labels`` with ``rules.renames`` applied; a renamed label wins over one already named
    so: with both ``pod`` (the scrape target's, i.e. the exporter's own pod) and
    ``exported_pod`` (the pod dcgm-exporter maps the GPU to), the GPU's pod is kept."""
    renames = dict(rules.renames)
    out: dict[str, str] = {}
    for key, value in labels:
        name = renames.get(key, key)
        if name == key and name in out:
            continue  # the renamed label came first: it wins
        out[name] = value
    return out


def workload(info: SeriesInfo, rules: LabelRules) -> str:
    """The workload of a GPU series: the value of the first of ``rules.workload_labels`` it
    carries (identity or context), a pod's as its owner (``pod_owner``), "" for none (an idle
    GPU, an exporter without job or pod mapping)."""
    return workload_of(info, rules)[1]


def workload_of(info: SeriesInfo, rules: LabelRules) -> tuple[str, str]:
    """``workload`` and the name of the label it was read from (("", "") for none)."""
    if not rules.workload_labels:
        return "", ""
    return _first_workload(dict((*info.labels, *info.context)), rules)


def _first_workload(labels: Mapping[str, str], rules: LabelRules) -> tuple[str, str]:
    for name in rules.workload_labels:
        if labels.get(name):
            return name, group_value(name, labels, rules)
    return "", ""


def group_value(name: str, labels: Mapping[str, str], rules: LabelRules) -> str:
    """What label ``name`` of a series with ``labels`` says about its peers ("" where it is
    absent): for ``pod`` (where ``rules.pod_owner``) its owner (``pod_owner``) in its
    namespace (``training/llm``: two teams' jobs of one name stay apart), a GPU's workload or
    a node's cohort; any other label's value as it is."""
    value = labels.get(name, "")
    if name != "pod" or not rules.pod_owner or not value:
        return value
    namespace = labels.get("namespace")
    return f"{namespace}/{pod_owner(value)}" if namespace else pod_owner(value)


# The characters of the random suffixes Kubernetes generates (apimachinery's rand.String:
# no vowels, no 0, 1 or 3), so they never spell a word: a Job's or a ReplicaSet's pods end in
# five of them, a Deployment's pods carry its pod-template hash (up to ten) before those.
_GENERATED_SUFFIX = re.compile(r"-[bcdfghjklmnpqrstvwxz2456789]{5}\Z")
_TEMPLATE_HASH = re.compile(r"-[bcdfghjklmnpqrstvwxz2456789]{6,10}\Z")
_ORDINAL = re.compile(r"(-[0-9]+)+\Z")  # a StatefulSet's ordinal, a job's worker index
# The roles training operators name a job's ranks by (PyTorchJob's master and workers, an
# MPIJob's workers), all of them the job's work.
_RANK_ROLE = re.compile(r"-(master|worker)\Z")


@lru_cache(maxsize=4096)  # every series of a GPU, and every GPU of a job, asks for the same pod
def pod_owner(pod: str) -> str:
    """The workload a pod belongs to, by the names Kubernetes gives pods: ``pod`` without a
    generated suffix (a Job's or ReplicaSet's ``-x7k2p``, after a Deployment's pod-template
    hash), then without trailing indices (a StatefulSet's ordinal, an indexed Job's or a
    training operator's worker index: ``train-worker-3``, ``train-1-0``), then without a
    rank's role (``-master``, ``-worker``: a PyTorchJob's master is a rank like its workers).
    So the pods of one job on a node's GPUs (``train-worker-0`` ... ``-7``) are one workload,
    ``train``, and pods of different jobs stay apart. A name that would come out empty is
    kept whole."""
    owner = pod
    generated = _GENERATED_SUFFIX.search(owner)
    if generated:
        owner = owner[: generated.start()]
        template = _TEMPLATE_HASH.search(owner)
        owner = owner[: template.start()] if template else owner
    ordinal = _ORDINAL.search(owner)
    owner = owner[: ordinal.start()] if ordinal else owner
    role = _RANK_ROLE.search(owner)
    owner = owner[: role.start()] if role else owner
    return owner or pod


def _grouping_of(labels: Mapping[str, str], rules: LabelRules) -> tuple[str, ...]:
    cohort = (group_value(n, labels, rules) for n in sorted(rules.relabel))
    return (_first_workload(labels, rules)[1], *cohort)


def grouping(info: SeriesInfo, rules: LabelRules) -> tuple[str, ...]:
    """What a series says about its peers: its ``workload`` (a GPU's team) and the values of
    the cohort labels (``rules.relabel``: its node's cohort). A context change that changes it
    is noted (``SeriesIndex.recontexted``)."""
    return _grouping_of(dict((*info.labels, *info.context)), rules)


def raw_grouping(labels: Labels, rules: LabelRules) -> tuple[str, ...]:
    """``grouping`` of a series from its raw labels (before normalization)."""
    return _grouping_of(_renamed(labels, rules), rules)


def _not_a_host(metric: str, key: str, value: str) -> str | None:
    """The label a ``node``-like label of node-exporter's own is kept under when its value is
    not a host's name, else None: its NUMA series carry ``node="0"`` (a number is never a
    host name) and its DRBD series ``node="local"``/``"remote"`` (the replication peer)."""
    if key not in ("node", "exported_node"):
        return None
    if value.isdigit():
        return "numa_node"
    if metric.startswith("node_drbd_"):
        return "drbd_node"
    return None


def _node_of(raw: Mapping[str, str], rules: LabelRules, metric: str) -> str:
    """The node a series names: its first of ``rules.node_labels`` (``instance``: the host)."""
    for key in rules.node_labels:
        value = raw.get(key, "")
        if value and _not_a_host(metric, key, value) is None:
            return _host_part(value) if key == "instance" else value
    return ""


def normalize(
    name: str, labels: Labels, rules: LabelRules, hosts: Mapping[str, str] | None = None
) -> Normalized:
    """Normalize one series: (metric, identity labels, node, gpu, context labels). ``hosts``
    renames nodes named by a scrape address (``host_names``)."""
    raw = _renamed(labels, rules)
    node = _node_of(raw, rules, name)
    if hosts:
        node = hosts.get(node, node)
    gpu = ""
    for key in rules.gpu_labels:
        if raw.get(key, ""):
            gpu = raw[key]
            break
    identity: list[tuple[str, str]] = []
    context: list[tuple[str, str]] = []
    per_target = name in SCRAPE_HEALTH_METRICS
    for key, value in raw.items():
        if key in rules.gpu_labels:
            continue
        is_context = key in rules.context_labels or (gpu != "" and key in rules.gpu_context_labels)
        if (kept_as := _not_a_host(name, key, value)) is not None:
            is_context = False  # a NUMA node id or DRBD peer distinguishes series
            key = kept_as
        if per_target and key == "job":
            is_context = False  # one health series per scrape job of the node (see above)
        (context if is_context else identity).append((key, value))
    if node:
        identity.append(("node", node))
    if gpu:
        identity.append(("gpu", gpu))
    return canonical_metric(name), tuple(sorted(identity)), node, gpu, tuple(sorted(context))


UNAME_METRIC = "node_uname_info"  # node-exporter: the host's uname, nodename among them
POD_INFO_METRIC = "kube_pod_info"  # kube-state-metrics: each pod's node and IP
_NO_HOST_NAME = frozenset({"", "localhost", "localhost.localdomain", "unknown", "(none)"})


def host_names(series: Iterable[tuple[str, Labels]], rules: LabelRules) -> dict[str, str]:
    """Per scrape address (the host part of ``instance``), the host name its exporters give
    it, for a dump from a Prometheus that scraped the nodes by address: node-exporter's series
    then name the node by its address, dcgm-exporter's by ``Hostname``, and one node would be
    two, its node-level evidence apart from its GPUs' and from the XIDs naming the host.
    A name comes from a series naming its node by another label beside its ``instance``
    (dcgm-exporter's ``Hostname``) or from node-exporter's ``node_uname_info`` (``nodename``).
    An address given two names (a push gateway's, a proxy's) keeps its own.

    In Kubernetes, dcgm-exporter without host networking names itself, not its node: its
    ``Hostname`` is its pod's name and its ``instance`` the pod's IP, both gone with the pod.
    With kube-state-metrics' ``kube_pod_info`` in the dump, a pod's name and IP are filed
    under the pod's node (the GPUs join their node's node-exporter series, and the node keeps
    its name across exporter restarts)."""
    names: dict[str, set[str]] = {}
    pods: dict[str, set[str]] = {}  # a pod's name -> its node (kube_pod_info)
    named: set[str] = set()  # the nodes the series name (a pod's name, for such an exporter)
    for name, labels in series:
        if name == POD_INFO_METRIC:
            own = dict(labels)  # its exported_* are the pod's own labels (honor_labels off)
            pod = own.get("exported_pod") or own.get("pod", "")
            node = own.get("exported_node") or own.get("node", "")
            if pod and node:
                pods.setdefault(pod, set()).add(node)
            continue
        raw = _renamed(labels, rules)
        host = raw.get("nodename", "") if name == UNAME_METRIC else _node_of(raw, rules, name)
        named.add(host)
        address = _host_part(raw.get("instance", ""))
        if address and host.lower() not in _NO_HOST_NAME and host != address:
            names.setdefault(address, set()).add(host)
    # only pods that name series (a pod-named dcgm-exporter): every other host keeps its name
    nodes = {pod: next(iter(on)) for pod, on in pods.items() if len(on) == 1 and pod in named}
    out = {address: next(iter(hosts)) for address, hosts in names.items() if len(hosts) == 1}
    return {**{a: nodes.get(h, h) for a, h in out.items()}, **nodes}  # a pod's IP: its node


def pod_named_nodes(
    series: Iterable[tuple[str, Labels]], rules: LabelRules, hosts: Mapping[str, str]
) -> list[str]:
    """Nodes of GPU series that name a dcgm-exporter pod, not a node: the series' own
    ``Hostname`` is its scrape target's ``pod`` (the exporter's pod without host networking),
    and ``hosts`` (``kube_pod_info``) does not file that pod under a node. Sorted."""
    named: set[str] = set()
    for name, labels in series:
        raw = dict(labels)
        pod = raw.get("Hostname") or raw.get("hostname")
        exporter_pod = pod and pod == raw.get("pod") and raw.get("gpu") and pod not in hosts
        if exporter_pod and _node_of(_renamed(labels, rules), rules, name) == pod:  # no node label
            named.add(pod)
    return sorted(named)
