"""Daemon config (detector.config) and log set-up (detector.logs) behave as specified."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from detector.config.load import Config, check_config, load_config
from detector.errors import ConfigError
from detector.logs import REDACTED, configure_logging, get_logger

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "deploy" / "config.example.yaml"
BCRYPT = "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def error_of(path: Path | None, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, env or {})
    return str(info.value)


def test_empty_file_is_valid_with_production_defaults(tmp_path: Path) -> None:
    """An empty file loads to the documented production defaults."""
    config = load_config(write(tmp_path, ""), {})
    resolved = {"kmsg": Config().kmsg, "scrape": Config().scrape}  # by mode, see _resolve
    assert Config() == config.model_copy(update=resolved)
    assert ("fleet", 15.0, 5.0) == (config.mode, config.scrape.interval_s, config.scrape.timeout_s)
    assert 32 * 1024 * 1024 == config.scrape.body_limit_bytes
    assert ["node", "hostname", "Hostname", "instance"] == config.labels.node_labels
    assert "0.0.0.0:9108" == config.server.listen
    assert (0.05, 5) == (config.scoring.common_mode_fraction, config.scoring.top_k)
    assert (3600.0, 300.0) == (config.evaluation.horizon_s, config.evaluation.grace_s)
    assert False is config.kmsg.enabled  # fleet mode: no local kernel log


def test_no_file_and_commented_out_sections_mean_defaults(tmp_path: Path) -> None:
    """No file, or a section whose keys are all commented out, gives the defaults."""
    assert load_config(None, {}) == load_config(write(tmp_path, "scrape:\n  # timeout_s: 3\n"), {})


def test_environment_overrides_file(tmp_path: Path) -> None:
    """DETECTOR_SECTION__KEY beats the file; values are parsed as YAML scalars."""
    path = write(tmp_path, "scrape:\n  timeout_s: 3\nalerts:\n  shadow: false\n")
    env = {
        "DETECTOR_SCRAPE__TIMEOUT_S": "4",
        "DETECTOR_ALERTS__SHADOW": "true",
        "DETECTOR_ALERTS__THRESHOLD": "0.65",
        "DETECTOR_ALERTS__SUPPRESS_XIDS": "[43, 63]",
        "detector_logging__level": "DEBUG",
        "UNRELATED": "x",
    }
    config = load_config(path, env)
    assert 4.0 == config.scrape.timeout_s
    assert True is config.alerts.shadow
    assert 0.65 == config.alerts.threshold
    assert [43, 63] == config.alerts.suppress_xids
    assert "debug" == config.logging.level


def test_environment_text_fields_stay_as_written() -> None:
    """Text fields from the environment are not YAML-converted (no octal, no booleans)."""
    env = {
        "DETECTOR_NODE_NAME": "0123",
        "DETECTOR_ALERTS__CLUSTER": "no",
        "DETECTOR_ALERTS__SUPPRESS_SIGNALS": "[ecc, 'no']",
    }
    config = load_config(None, env)
    assert ("0123", "no") == (config.node_name, config.alerts.cluster)
    assert ["ecc", "no"] == config.alerts.suppress_signals


def test_bad_value_names_file_and_field(tmp_path: Path) -> None:
    """A bad value names the file and the dotted field path with what was given."""
    path = write(tmp_path, "scrape:\n  timeout_s: -1\n")
    assert f"{path}: scrape.timeout_s: must be > 0 (got -1)" == error_of(path)


def test_bad_environment_value_names_the_variable() -> None:
    """A bad value from the environment names the variable that set it."""
    message = error_of(None, {"DETECTOR_SCRAPE__INTERVAL_S": "soon"})
    assert message.startswith("DETECTOR_SCRAPE__INTERVAL_S: scrape.interval_s: must be")
    assert "(got 'soon')" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("scrap: {}\n", "scrap: unknown key (did you mean 'scrape'?)"),
        ("scrape:\n  timeot_s: 1\n", "scrape.timeot_s: unknown key (did you mean 'timeout_s'?)"),
        (
            "alerts:\n  storm:\n    fractoin: 0.3\n",
            "alerts.storm.fractoin: unknown key (did you mean 'fraction'?)",
        ),
        (
            "targets:\n  static:\n    - {urll: 'http://a:9400/metrics'}\n",
            "targets.static[0].urll: unknown key (did you mean 'url'?)",
        ),
    ],
)
def test_unknown_key_is_an_error_with_suggestion(tmp_path: Path, text: str, expected: str) -> None:
    """An unknown key anywhere is an error, with the closest valid key suggested."""
    path = write(tmp_path, text)
    assert f"{path}: {expected}" in error_of(path).splitlines()


def test_unknown_key_far_from_any_lists_valid_keys(tmp_path: Path) -> None:
    """With no close match the error lists the section's valid keys."""
    message = error_of(write(tmp_path, "evaluation:\n  xyzzy: 1\n"))
    assert message.endswith("evaluation.xyzzy: unknown key (valid keys: horizon_s, grace_s)")


def test_unknown_environment_key_names_variable() -> None:
    """A misspelt DETECTOR_ variable is an error naming it, with a suggestion."""
    message = error_of(None, {"DETECTOR_ALERTS__SHADOWW": "true"})
    assert (
        "DETECTOR_ALERTS__SHADOWW: alerts.shadoww: unknown key (did you mean 'shadow'?)" == message
    )


def test_kubernetes_service_link_variables_are_ignored() -> None:
    """Variables a Service named 'detector' injects into pods are not config keys."""
    env = {
        "DETECTOR_SERVICE_HOST": "10.0.0.9",
        "DETECTOR_SERVICE_PORT": "9108",
        "DETECTOR_SERVICE_PORT_HTTP": "9108",
        "DETECTOR_PORT": "tcp://10.0.0.9:9108",
        "DETECTOR_PORT_9108_TCP_ADDR": "10.0.0.9",
    }
    assert load_config(None, {}) == load_config(None, env)


def test_every_problem_is_reported_one_per_line(tmp_path: Path) -> None:
    """All invalid fields are reported at once, not only the first."""
    path = write(tmp_path, "scrape:\n  interval_s: 0\nalerts:\n  cooldown_s: -5\n")
    lines = error_of(path).splitlines()
    assert [f"{path}: scrape.interval_s: must be > 0 (got 0)",
            f"{path}: alerts.cooldown_s: must be >= 0 (got -5)"] == lines  # fmt: skip


def test_timeout_must_be_below_interval(tmp_path: Path) -> None:
    """scrape.timeout_s >= scrape.interval_s is rejected with both values."""
    message = error_of(write(tmp_path, "scrape:\n  interval_s: 10\n  timeout_s: 10\n"))
    assert "scrape: timeout_s must be < interval_s" in message
    assert "timeout_s=10, interval_s=10" in message


@pytest.mark.parametrize(("ratio", "valid"), [(0.0, False), (0.5, True), (1.0, True), (1.5, False)])
def test_clear_ratio_must_be_in_unit_interval(ratio: float, valid: bool) -> None:
    """alerts.clear_ratio lies in (0, 1]."""
    env = {"DETECTOR_ALERTS__CLEAR_RATIO": str(ratio)}
    if valid:
        assert ratio == load_config(None, env).alerts.clear_ratio
    else:
        assert "alerts.clear_ratio: must be" in error_of(None, env)


def test_shard_is_parsed_and_index_below_count() -> None:
    """shard 'i/N' parses; i >= N and malformed text are errors."""
    shard = load_config(None, {"DETECTOR_SHARD": "2/4"}).shard
    assert shard is not None
    assert (2, 4, "2/4") == (shard.index, shard.count, str(shard))
    assert "shard index must be < shard count (got 4/4" in error_of(None, {"DETECTOR_SHARD": "4/4"})
    assert "must be written 'i/N'" in error_of(None, {"DETECTOR_SHARD": "two of four"})


def test_the_series_cap_follows_the_mode_unless_set() -> None:
    """scrape.max_series_total left out: 250,000 for an agent (one node, a 1 GiB pod), 2M for
    a fleet; a value given is kept in either mode."""
    agent = load_config(None, {"DETECTOR_MODE": "agent", "NODE_NAME": "n1"})
    assert 250_000 == agent.scrape.max_series_total
    assert 2_000_000 == load_config(None, {}).scrape.max_series_total
    given = {"DETECTOR_MODE": "agent", "DETECTOR_SCRAPE__MAX_SERIES_TOTAL": "5000"}
    assert 5000 == load_config(None, given).scrape.max_series_total


def test_shard_is_rejected_in_agent_mode() -> None:
    """Sharding only exists in fleet mode."""
    message = error_of(None, {"DETECTOR_MODE": "agent", "DETECTOR_SHARD": "0/2"})
    assert "shard is only meaningful in fleet mode" in message


def test_agent_mode_resolves_node_name_and_kmsg(tmp_path: Path) -> None:
    """Agent mode: node_name from NODE_NAME (else the host name), kernel log on."""
    path = write(tmp_path, "mode: agent\n")
    config = load_config(path, {"NODE_NAME": "gpu-node-07"})
    assert ("gpu-node-07", True) == (config.node_name, config.kmsg.enabled)
    assert load_config(path, {}).node_name  # falls back to the host name
    explicit = load_config(path, {"NODE_NAME": "a", "DETECTOR_NODE_NAME": "b"})
    assert "b" == explicit.node_name


def test_relative_paths_follow_the_config_file(tmp_path: Path) -> None:
    """Relative paths in the file resolve against its directory; env paths stay as given."""
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "config.yaml"
    path.write_text("targets:\n  file_sd: sd/*.json\ncalibration:\n  path: cal.json\n")
    config = load_config(path, {"DETECTOR_STATE__PATH": "run/state"})
    assert [tmp_path / "etc" / "sd" / "*.json"] == config.targets.file_sd
    assert tmp_path / "etc" / "cal.json" == config.calibration.path
    assert Path("run/state") == config.state.path


def test_file_problems_name_file_and_line(tmp_path: Path) -> None:
    """Unreadable files, YAML syntax errors and duplicate keys name the file (and line)."""
    missing = tmp_path / "nope.yaml"
    assert error_of(missing).startswith(f"{missing}: cannot read")
    assert error_of(write(tmp_path, "scrape: {\n")).startswith(f"{tmp_path / 'config.yaml'}:2:")
    dup = error_of(write(tmp_path, "mode: fleet\nscrape: {}\nmode: agent\n"))
    assert f"{tmp_path / 'config.yaml'}:3:1: invalid YAML: duplicate key 'mode'" == dup
    assert "top level must be a mapping" in error_of(write(tmp_path, "- a\n"))
    assert "must be a mapping of keys" in error_of(None, {"DETECTOR_SCRAPE": "5"})


def test_passwords_must_be_hashes_and_stay_hidden(tmp_path: Path) -> None:
    """basic_auth accepts bcrypt/sha256 hashes only and never shows them."""
    bad = error_of(write(tmp_path, "server:\n  basic_auth:\n    ops: hunter2\n"))
    assert "users ['ops']: password must be a bcrypt hash" in bad
    assert "hunter2" not in bad
    path = write(
        tmp_path, f"server:\n  basic_auth:\n    ops: '{BCRYPT}'\n    ci: 'sha256:{'a' * 64}'\n"
    )
    config = load_config(path, {})
    assert BCRYPT == config.server.basic_auth["ops"].get_secret_value()
    assert BCRYPT not in repr(config)
    summary = check_config(path, {})
    assert "basic auth users: 2" in summary
    assert BCRYPT not in summary


def test_tls_cert_and_key_go_together() -> None:
    """Setting only one of tls_cert/tls_key is an error."""
    message = error_of(None, {"DETECTOR_SERVER__TLS_CERT": "/etc/tls/crt.pem"})
    assert "server: tls_cert and tls_key must be set together" in message


def test_threshold_resolution_order() -> None:
    """Explicit threshold, else the calibrated one, else 0.6; clearing uses clear_ratio."""
    alerts = load_config(None, {}).alerts
    assert (0.6, 0.7) == (alerts.resolve_threshold(None), alerts.resolve_threshold(0.7))
    explicit = load_config(None, {"DETECTOR_ALERTS__THRESHOLD": "0.9"}).alerts
    assert 0.9 == explicit.resolve_threshold(0.7)
    assert pytest.approx(0.72) == explicit.clear_threshold(0.9)


def test_example_config_loads_clean() -> None:
    """deploy/config.example.yaml is valid and check_config reports no warnings."""
    config = load_config(EXAMPLE, {})
    assert 2 == len(config.targets.static)
    summary = check_config(EXAMPLE, {})
    assert summary.startswith(f"{EXAMPLE}: valid")
    assert "warning" not in summary


def test_example_config_shows_the_defaults_but_its_targets_and_shadow_mode() -> None:
    """deploy/config.example.yaml says its values are the defaults unless a comment says
    otherwise: only its example targets and alerts.shadow (on, for a first deployment) differ."""
    example = load_config(EXAMPLE, {})
    assert example.alerts.shadow is True
    not_defaults = {"targets": {"static"}, "alerts": {"shadow"}}
    assert load_config(None, {}).model_dump(exclude=not_defaults) == example.model_dump(
        exclude=not_defaults
    )


def test_check_config_names_overrides_and_missing_files(tmp_path: Path) -> None:
    """The summary lists environment overrides by name and files that do not exist."""
    path = write(tmp_path, "calibration:\n  path: cal.json\ntargets:\n  file_sd: [sd/*.yaml]\n")
    summary = check_config(path, {"DETECTOR_ALERTS__SHADOW": "true"})
    assert "SHADOW (nothing sent)" in summary
    assert "at most 2,000,000 series" in summary  # fleet mode
    assert "series dropped where device=~veth.*|cali.*" in summary
    assert "environment overrides: DETECTOR_ALERTS__SHADOW" in summary
    assert f"warning: {tmp_path / 'cal.json'} does not exist" in summary
    assert f"warning: {tmp_path / 'sd' / '*.yaml'} matches no file" in summary
    (tmp_path / "sd").mkdir()
    (tmp_path / "sd" / "a.yaml").write_text("[]\n")
    assert "matches no file" not in check_config(path, {})


def test_check_config_warns_of_pod_cohorts_without_pod_owners(tmp_path: Path) -> None:
    """Pods as cohorts need their owners: each node's own pods would make a cohort each."""
    both = "labels:\n  cohort_labels: [pod]\n"
    summary = check_config(write(tmp_path, both), {})
    assert "cohorts by pod; GPU workloads by hpc_job, pod (a pod's: its owner)" in summary
    assert "warning" not in summary
    alone = both + "  gpu_workload_pod_owner: false\n"
    assert "so no node has cohort peers" in check_config(write(tmp_path, alone), {})


def test_json_schema_covers_every_section() -> None:
    """Config.model_json_schema() documents every section for editors."""
    schema = Config.model_json_schema()
    assert set(Config.model_fields) == set(schema["properties"])
    assert {"scrape", "alerts", "server", "logging"} <= set(schema["properties"])


# ---------------------------------------------------------------------------- logging


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """Configure logging into a buffer; restore structlog and the root logger after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    yield stream
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def lines_of(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_log_lines_are_json_with_timestamp_level_event(log_stream: io.StringIO) -> None:
    """JSON format writes one object per line: timestamp, level, event, then context."""
    configure_logging("info", "json", log_stream)
    get_logger(component="scrape").info("scrape done", target="http://n1:9400/metrics", n=3)
    [record] = lines_of(log_stream)
    assert ["timestamp", "level", "event", "component", "target", "n"] == list(record)
    assert ("info", "scrape done", 3) == (record["level"], record["event"], record["n"])
    assert str(record["timestamp"]).endswith("Z")


def test_level_filters_lower_levels(log_stream: io.StringIO) -> None:
    """Events below the configured level are dropped; a logger made earlier follows reconfig."""
    log = get_logger()
    configure_logging("warning", "json", log_stream)
    log.info("dropped")
    log.warning("kept")
    assert ["kept"] == [r["event"] for r in lines_of(log_stream)]


@pytest.mark.parametrize(
    ("fields", "secret"),
    [
        ({"password": "hunter2"}, "hunter2"),
        ({"api_token": "tok-123"}, "tok-123"),
        ({"headers": {"Authorization": "Bearer abc.def"}}, "abc.def"),
        ({"headers": [("X-Auth-Token", "tok-456")]}, "tok-456"),
        ({"server": {"basic_auth": {"ops": BCRYPT}}}, BCRYPT),
        ({"client_secret": "s3cr3t"}, "s3cr3t"),
        ({"url": "http://ops:pa55@am:9093/api/v2/alerts"}, "pa55"),
        ({"detail": "sent Basic b3BzOnBhNTU="}, "b3BzOnBhNTU="),
        ({"detail": "retry with token=zz9&x=1"}, "zz9"),
    ],
)
def test_secrets_are_redacted_from_logs(
    log_stream: io.StringIO, fields: dict[str, object], secret: str
) -> None:
    """Secret values never reach the log, whatever their nesting or form."""
    configure_logging("debug", "json", log_stream)
    get_logger().info("request", **fields)
    text = log_stream.getvalue()
    assert secret not in text
    assert REDACTED in text
    assert "request" == lines_of(log_stream)[0]["event"]


def test_stdlib_records_share_format_and_redaction(log_stream: io.StringIO) -> None:
    """Library records (stdlib logging) come out as the same JSON, redacted; httpx INFO is muted."""
    configure_logging("info", "json", log_stream)
    logging.getLogger("some.library").warning("login failed password=%s", "hunter2")
    logging.getLogger("httpx").info("HTTP Request: GET http://n1:9400/metrics 200")
    [record] = lines_of(log_stream)
    assert ("warning", "some.library") == (record["level"], record["logger"])
    assert f"login failed password={REDACTED}" == record["event"]


def test_console_format_is_human_readable(log_stream: io.StringIO) -> None:
    """The console renderer writes key=value text, also redacted."""
    configure_logging("info", "console", log_stream)
    get_logger(node="n1").info("alert firing", token="t0k")
    text = log_stream.getvalue()
    assert "alert firing" in text
    assert "node=n1" in text
    assert "t0k" not in text


def test_bad_level_or_format_is_rejected() -> None:
    """configure_logging refuses an unknown level or format."""
    with pytest.raises(ValueError, match="log level"):
        configure_logging("loud")
    with pytest.raises(ValueError, match="log format"):
        configure_logging("info", "xml")


def test_importing_logs_configures_nothing() -> None:
    """Importing detector.logs adds no handler and leaves structlog unconfigured."""
    code = (
        "import logging, structlog, detector.logs\n"
        "print(len(logging.getLogger().handlers), structlog.is_configured())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "0 False" == out.stdout.strip()
