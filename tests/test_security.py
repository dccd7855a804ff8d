"""Security of the running daemon: the real entry point in a subprocess with TLS, basic auth,
an Alertmanager URL and scrape targets that carry credentials, logging at debug level.

Also from the source and deploy files: no shell-outs anywhere in detector/, and the systemd
unit and Helm chart run the daemon as a non-root user with no privileges.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from chaos.alertmanager import FakeAlertmanager
from chaos.daemon_process import DaemonProcess
from chaos.harness import free_port, quiet_scenario, restored_logging, write_config
from step_clock import SharedStepClock
from test_crash_restart import wait_for
from test_server import self_signed

from detector.service.daemon import main_run
from detector.sim import FailureSpec, serve

REPO = Path(__file__).resolve().parent.parent
SPEED = 50.0  # one 30 s simulated step per 0.6 s tick
USER, PASSWORD = "prometheus", "Pr0m-scrape-pa55word"
AM_USER, AM_PASSWORD = "amuser", "Am-d3livery-s3cret"
TARGET_USER, TARGET_PASSWORD = "exporter", "Exp0rter-t0ken-value"
DIGEST = hashlib.sha256(PASSWORD.encode()).hexdigest()
SECRETS = (PASSWORD, AM_PASSWORD, TARGET_PASSWORD, DIGEST)
TIMEOUT_S = 0.5  # server.request_timeout_s
MAX_REQUEST = 4096


@dataclass
class Running:
    base: str  # https://127.0.0.1:<port>
    trust: ssl.SSLContext
    proc: DaemonProcess
    am: FakeAlertmanager
    dead_target: str  # the failing target's URL, credentials included

    def auth(self, user: str, password: str) -> dict[str, str]:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def get(self, path: str, **headers: str) -> httpx.Response:
        return httpx.get(f"{self.base}{path}", headers=headers, verify=self.trust, timeout=60)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("security")
    cert, key = self_signed(tmp)
    scenario = quiet_scenario(
        nodes=3,
        gpus=2,
        failures=(FailureSpec("gsp", node=1, gpu=0, at_s=1500.0, lead_s=0.0, xid=119),),
    )
    # The exporters and the daemon's process share a clock the daemon steps one interval a
    # tick (tests/step_clock.py): on a wall clock a slow start let the XID pass unseen.
    clock_file = tmp / "clock"
    exporters = serve(scenario, port=0, speed=SPEED, clock=SharedStepClock(clock_file))
    am = FakeAlertmanager().up()
    dead_am = f"http://{AM_USER}:{AM_PASSWORD}@127.0.0.1:{free_port()}"
    live_am = am.url.replace("http://", f"http://{AM_USER}:{AM_PASSWORD}@")
    targets = [{"url": dcgm, "node": node} for node, (dcgm, _) in exporters.urls.items()]
    dead = f"http://{TARGET_USER}:{TARGET_PASSWORD}@127.0.0.1:{free_port()}/metrics"
    targets.append({"url": dead, "node": "node-09"})
    port = free_port()
    config = write_config(
        tmp / "config.yaml",
        targets,
        scrape={"interval_s": 0.6, "timeout_s": 0.5},
        alerts={"threshold": 0.99, "alertmanager_urls": [live_am, dead_am]},
        server={
            "listen": f"127.0.0.1:{port}",
            "tls_cert": str(cert),
            "tls_key": str(key),
            "basic_auth": {USER: f"sha256:{DIGEST}"},
            "request_timeout_s": TIMEOUT_S,
            "max_request_bytes": MAX_REQUEST,
        },
        logging={"level": "debug", "format": "json"},
    )
    proc = DaemonProcess(config, scenario.start, 0.0, SPEED, tmp, clock_file)
    trust = ssl.create_default_context(cafile=str(cert))
    running = Running(f"https://127.0.0.1:{port}", trust, proc, am, dead)
    proc.start()
    try:

        def up() -> bool:
            assert proc.alive(), proc.raw_logs()[-3000:]
            try:
                return running.get("/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 20, "the daemon to serve /readyz over TLS")
        yield running
    finally:
        proc.stop()
        proc.kill9()
        am.down()
        exporters.close()


def test_metrics_need_the_right_credentials(daemon: Running) -> None:
    """/metrics: 401 without credentials, with a wrong password or an unknown user; 200 with
    the right ones; /healthz stays open for probes."""
    assert 401 == daemon.get("/metrics").status_code
    assert 401 == daemon.get("/metrics", **daemon.auth(USER, "wrong")).status_code
    assert 401 == daemon.get("/metrics", **daemon.auth("nobody", PASSWORD)).status_code
    reply = daemon.get("/metrics", **daemon.auth(USER, PASSWORD))
    assert 200 == reply.status_code
    assert "detector_build_info" in reply.text
    assert 200 == daemon.get("/healthz").status_code


def test_plain_http_gets_no_answer_from_a_tls_daemon(daemon: Running) -> None:
    """TLS is not optional once configured: a plain HTTP request gets no HTTP response."""
    with pytest.raises(httpx.HTTPError):
        httpx.get(daemon.base.replace("https", "http") + "/healthz", timeout=2)


def _raw(daemon: Running, data: bytes, timeout_s: float = 60.0) -> bytes:
    """Send ``data`` over TLS, read until the server closes; the reply."""
    host, port = daemon.base.removeprefix("https://").split(":")
    with (
        socket.create_connection((host, int(port)), timeout=timeout_s) as plain,
        daemon.trust.wrap_socket(plain, server_hostname=host) as tls,
    ):
        tls.sendall(data)
        chunks = []
        while chunk := tls.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_request_size_limits_hold_on_the_running_daemon(daemon: Running) -> None:
    """A request head over max_request_bytes gets 431, a declared body over it 413."""
    head = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * (2 * MAX_REQUEST) + b"\r\n\r\n"
    assert _raw(daemon, head).startswith(b"HTTP/1.1 431 ")
    body = b"GET /metrics HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (10 * MAX_REQUEST)
    assert _raw(daemon, body).startswith(b"HTTP/1.1 413 ")


def test_slow_loris_client_is_dropped_and_others_are_served(daemon: Running) -> None:
    """A client that sends half a request and stalls is disconnected by the server without an
    answer (its request_timeout_s); meanwhile other clients get their responses."""
    host, port = daemon.base.removeprefix("https://").split(":")
    with (
        socket.create_connection((host, int(port)), timeout=60) as plain,
        daemon.trust.wrap_socket(plain, server_hostname=host) as loris,
    ):
        loris.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        assert 200 == daemon.get("/healthz").status_code  # served while the loris waits
        # b"" is the server closing with nothing sent; had it kept the connection open, this
        # socket's own 60 s timeout would raise TimeoutError here instead
        assert b"" == loris.recv(65536)


def test_secrets_never_reach_logs_or_metrics(daemon: Running) -> None:
    """With credentials in the Alertmanager URLs and a target URL, a password hash in the
    config and clients sending right and wrong passwords, at debug level: no password or
    hash appears in any log line or on /metrics (the failing Alertmanager and target make
    sure their URLs are logged)."""
    for password in (PASSWORD, "wrong-" + PASSWORD):
        daemon.get("/metrics", **daemon.auth(USER, password))
    # 50 ticks after the start: a hang guard of 300 s
    wait_for(lambda: daemon.am.alerts(node="node-02"), 100, "the planted failure delivered")
    wait_for(
        lambda: "alert delivery failed" in daemon.proc.raw_logs(), 20, "a failed delivery logged"
    )
    page = daemon.get("/metrics", **daemon.auth(USER, PASSWORD)).text
    logs = daemon.proc.raw_logs()
    assert "scrape failed" in logs  # the target with credentials was logged
    assert "127.0.0.1" in logs
    for secret in SECRETS:
        assert secret not in logs
        assert secret not in page
    public = daemon.dead_target.replace(f"{TARGET_USER}:{TARGET_PASSWORD}@", "")
    assert f'detector_scrape_errors_total{{reason="connect",target="{public}"}}' in page


def test_config_errors_never_echo_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config the daemon refuses (a plain-text password, an Alertmanager URL of the wrong
    scheme with credentials, a bad env override): exit 2, and the error it logs names the
    fields but none of the secrets."""
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "server": {"basic_auth": {USER: PASSWORD}},
                "alerts": {"alertmanager_urls": [f"ftp://{AM_USER}:{AM_PASSWORD}@am:9093"]},
            }
        )
    )
    env = {"DETECTOR_ALERTS__RUNBOOK_URL": f"https://{TARGET_USER}:{TARGET_PASSWORD}@wiki/x"}
    with restored_logging():
        assert 2 == main_run(path, env=env)
    err = capsys.readouterr().err
    assert "server.basic_auth" in err
    assert "alerts.alertmanager_urls" in err
    for secret in SECRETS:
        assert secret not in err


# -- source and deploy files ---------------------------------------------------------------

_SHELL_MODULES = {"subprocess", "pty", "commands", "popen2"}
_SHELL_CALLS = {
    ("os", name)
    for name in (
        "system",
        "popen",
        "spawnl",
        "spawnlp",
        "spawnv",
        "spawnvp",
        "execv",
        "execvp",
        "execl",
        "execlp",
        "posix_spawn",
        "fork",
    )
} | {("asyncio", "create_subprocess_exec"), ("asyncio", "create_subprocess_shell")}


def shell_outs(source: str, filename: str) -> list[str]:
    """Every way ``source`` could run another program: imports of subprocess-like modules,
    os.system/popen/exec*/spawn*, asyncio subprocesses, any ``shell=True``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} import {a.name}" for a in node.names if a.name in _SHELL_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.module in _SHELL_MODULES:
                found.append(f"{where} from {node.module}")
            if node.module in ("os", "asyncio"):
                names = {(node.module, a.name) for a in node.names}
                found += [f"{where} from {m} import {n}" for m, n in names & _SHELL_CALLS]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in _SHELL_CALLS:
                found.append(f"{where} {node.value.id}.{node.attr}")
        elif isinstance(node, ast.keyword) and node.arg == "shell":
            found.append(f"{where} shell=")
    return found


def test_the_shell_out_scanner_finds_each_kind() -> None:
    """The scanner below is not blind: each planted shell-out is reported."""
    planted = (
        "import subprocess\nfrom os import system\nimport os, asyncio\n"
        "os.popen('x')\nasyncio.create_subprocess_shell('x')\nrun('x', shell=True)\n"
    )
    assert 5 == len(shell_outs(planted, "planted.py"))


# The one program the detector may run: Slurm's scontrol, to drain a node when node actions
# are enabled with actions.kind slurm (off by default), with an argument list and no shell.
ALLOWED_SHELL_OUTS = ["detector/actions/slurm.py:38 asyncio.create_subprocess_exec"]


def test_detector_never_runs_another_program() -> None:
    """No module of detector/ imports subprocess or calls os.system/popen/exec/spawn or
    asyncio subprocesses, and nothing passes shell=True; the one exception is the Slurm
    executor's scontrol (argument list, no shell)."""
    found: list[str] = []
    for path in sorted((REPO / "detector").rglob("*.py")):
        found += shell_outs(path.read_text(), str(path.relative_to(REPO)))
    assert ALLOWED_SHELL_OUTS == found
    assert "shell=True" not in (REPO / "detector/actions/slurm.py").read_text()


def test_systemd_unit_runs_unprivileged() -> None:
    """The unit runs as a dynamic (non-root) user with no capabilities and no way to gain
    privileges; the kmsg drop-in adds CAP_SYSLOG only, still without root."""
    unit = (REPO / "deploy/systemd/gpu-failure-detector.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and line[0] != "#"
    )
    assert "yes" == settings["DynamicUser"]
    assert settings.get("User", "") not in ("root", "0")
    assert ("", "", "yes") == (
        settings["CapabilityBoundingSet"],
        settings["AmbientCapabilities"],
        settings["NoNewPrivileges"],
    )
    dropin = (REPO / "deploy/systemd/gpu-failure-detector.service.d/kmsg.conf").read_text()
    assert "User=" not in dropin
    assert "CapabilityBoundingSet=CAP_SYSLOG" in dropin


def test_helm_chart_runs_non_root_by_default() -> None:
    """values.yaml: the pod runs as a non-root uid, no privilege escalation, every capability
    dropped, read-only root; only the kmsg agent (opt-in, documented) runs privileged."""
    chart = REPO / "deploy/helm/gpu-failure-detector"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    pod, container = values["podSecurityContext"], values["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert pod["runAsUser"] != 0
    assert (False, True, ["ALL"]) == (
        container["allowPrivilegeEscalation"],
        container["readOnlyRootFilesystem"],
        container["capabilities"]["drop"],
    )
    assert values["agent"]["kmsg"]["enabled"] is False
    templates = "".join(p.read_text() for p in (chart / "templates").glob("*"))
    assert "toYaml .Values.podSecurityContext" in templates
