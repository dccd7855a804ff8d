"""Rule catalogs: loading, validation messages, and what the shipped catalogs decide."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from detector.config.rules import (
    DEFAULT_RULES_DIR,
    ScorerName,
    SignalRule,
    export_pattern,
    load_signal_rules,
    load_xid_catalog,
)
from detector.errors import ConfigError
from detector.scorers.registry import SCORERS

# DCGM fields the catalog deliberately leaves to the generic default rule (scored at low
# weight) or to the ignore list (never scored). Every other field must have a named rule.
DCGM_LEFT_TO_DEFAULT = {
    "DCGM_FI_DEV_ENC_UTIL",  # video encoder: idle on training clusters
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",  # per link; the total has a named rule
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE",  # workload mix, not health
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
}
DCGM_IGNORED = {
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION",  # throttled because idle: not a fault
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DRIVER_VERSION",
    "DCGM_FI_NVML_VERSION",
    "DCGM_FI_DEV_BRAND",
    "DCGM_FI_DEV_SERIAL",
    "DCGM_FI_DEV_OEM_INFOROM_VER",
    "DCGM_FI_DEV_ECC_INFOROM_VER",
    "DCGM_FI_DEV_POWER_INFOROM_VER",
    "DCGM_FI_DEV_INFOROM_IMAGE_VER",
    "DCGM_FI_DEV_VBIOS_VERSION",
}
DCGM_TRUTH = {"DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT"}

GOOD_RULE = """
  - name: gpu_temp
    metrics: [DCGM_FI_DEV_GPU_TEMP]
    transform: level
    entity: gpu
"""


def _write(tmp_path: Path, body: str, name: str = "signals.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def _dcgm_fields(path: Path) -> set[str]:
    """Every field of a dcgm-exporter CSV, enabled or commented out."""
    pattern = re.compile(r"^#?\s*(DCGM_[A-Z0-9_]+)\s*,")
    lines = path.read_text(encoding="utf-8").splitlines()
    return {m.group(1) for line in lines if (m := pattern.match(line))}


def test_shipped_catalogs_load() -> None:
    """The built-in signals.yaml and xid.yaml validate and resolve from DEFAULT_RULES_DIR."""
    signals = load_signal_rules()
    xids = load_xid_catalog()
    assert DEFAULT_RULES_DIR.name == "rules"
    assert load_signal_rules(DEFAULT_RULES_DIR).signals == signals.signals
    assert len(signals.signals) > 40
    assert xids.get(79) is not None


def test_rules_can_name_every_registered_scorer(tmp_path: Path) -> None:
    """A rule may name any scorer the registry builds (the Literal and the registry agree), and
    one that names the frozen-gauge scorer loads."""
    assert set(get_args(ScorerName)) == set(SCORERS)
    path = tmp_path / "signals.yaml"
    path.write_text(
        "signals:\n  - name: power\n    metrics: [DCGM_FI_DEV_POWER_USAGE]\n"
        "    transform: level\n    entity: gpu\n    scorers: [peers, stuck]\n",
        encoding="utf-8",
    )
    assert ("peers", "stuck") == tuple(load_signal_rules(path).signals[0].scorers)


def test_bad_transform_names_file_and_field(tmp_path: Path) -> None:
    """A wrong enum value is reported with the file, the list index and the allowed values."""
    body = "signals:" + GOOD_RULE + GOOD_RULE.replace("gpu_temp", "t2").replace("level", "lvl")
    path = _write(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        load_signal_rules(path)
    expected = "signals[1].transform: must be one of level, rate, edge, presence, ratio"
    assert f"{path}: {expected}" == str(err.value)


def test_negative_weight_and_unknown_field_are_named(tmp_path: Path) -> None:
    """Every problem of a file is listed, each with its field path."""
    body = "signals:" + GOOD_RULE + "    weight: -1\n    colour: red\n"
    with pytest.raises(ConfigError) as err:
        load_signal_rules(_write(tmp_path, body))
    message = str(err.value)
    assert "signals[0].weight: Input should be greater than or equal to 0" in message
    assert "signals[0].colour: unknown field" in message


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    """YAML syntax errors carry file and line."""
    path = _write(tmp_path, "signals:\n  - name: [unclosed\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:3:1: invalid YAML")):
        load_signal_rules(path)


def test_duplicate_signal_names_are_rejected(tmp_path: Path) -> None:
    """Signal names are unique across the catalog."""
    with pytest.raises(ConfigError, match="'gpu_temp' is used twice"):
        load_signal_rules(_write(tmp_path, "signals:" + GOOD_RULE + GOOD_RULE))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("    pattern: 'DCGM_(['\n", "signals[0]: invalid regular expression"),
        (
            "    scorers: [health]\n",
            "signals[0]: signals scored by 'health' must be named health_*",
        ),
        ("    scorers: [magic]\n", "signals[0].scorers[0]: must be one of zscore, changepoint"),
        (
            "    log_unit: 0.001\n    resolution: 0.1\n",
            "signals[0]: log_unit takes a level, rate or ratio transform and no resolution",
        ),
        ("    log_unit: -1\n", "signals[0].log_unit: Input should be greater than or equal to 0"),
    ],
)
def test_rule_level_checks_name_the_rule(tmp_path: Path, extra: str, message: str) -> None:
    """Bad regexes, misnamed health signals, unknown scorers and a log space that cannot hold
    (beside a rounding step, which the peers' quantization floor reads in the raw unit) are
    rejected with their rule."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_signal_rules(_write(tmp_path, "signals:" + GOOD_RULE + extra))


def test_log_space_is_refused_on_an_edge(tmp_path: Path) -> None:
    """An edge is 0 or 1 (the value changed): it has no log space, and the rule is named."""
    edge = GOOD_RULE.replace("transform: level", "transform: edge") + "    log_unit: 0.001\n"
    with pytest.raises(ConfigError, match=re.escape("signals[0]: log_unit takes a level")):
        load_signal_rules(_write(tmp_path, "signals:" + edge))


def test_rule_without_metrics_or_pattern_is_rejected() -> None:
    """A non-presence rule must say which series it reads."""
    with pytest.raises(ValueError, match="give metrics and/or pattern"):
        SignalRule(name="x", transform="level", entity="gpu")


def test_unknown_presence_signal_is_rejected() -> None:
    """Presence signals are computed by signals.py; only the known ones can be declared."""
    with pytest.raises(ValueError, match="presence signal 'health_fans' unknown"):
        SignalRule(name="health_fans", transform="presence", entity="node")


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    """A missing rules file names its path."""
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "nope.yaml"))):
        load_xid_catalog(tmp_path / "nope.yaml")


def test_every_dcgm_field_has_a_deliberate_fate(real_data: Path) -> None:
    """Each field of dcgm-exporter's default and DCP lists is named, ignored, truth or default."""
    csv_dir = real_data / "exporters" / "dcgm"
    fields = _dcgm_fields(csv_dir / "default-counters.csv") | _dcgm_fields(
        csv_dir / "dcp-metrics-included.csv"
    )
    assert len(fields) > 50
    catalog = load_signal_rules()
    fate: dict[str, str] = {}
    for field in fields:
        verdict = catalog.classify(field)
        if isinstance(verdict, str):
            fate[field] = verdict
        else:
            fate[field] = "truth" if verdict.truth else "named"
    assert {f for f, v in fate.items() if v == "default"} == DCGM_LEFT_TO_DEFAULT
    assert {f for f, v in fate.items() if v == "ignore"} == DCGM_IGNORED & fields
    assert {f for f, v in fate.items() if v == "truth"} == DCGM_TRUTH
    named = fields - DCGM_LEFT_TO_DEFAULT - DCGM_IGNORED - DCGM_TRUTH
    assert all(fate[f] == "named" for f in named)


@pytest.mark.parametrize(
    ("metric", "signal"),
    [
        ("node_nfs_rpc_retransmissions_total", "nfs_rpc_retransmissions"),
        ("node_mountstats_nfs_operations_queue_time_seconds_total", "nfs_op_queue_time"),
        ("node_mountstats_nfs_operations_response_time_seconds_total", "nfs_op_rtt"),
        ("node_mountstats_nfs_transport_backlog_queue_total", "nfs_transport_backlog"),
        ("node_infiniband_link_downed_total", "ib_link_downed"),
        ("node_infiniband_port_errors_received_total", "ib_port_rcv_errors"),
        ("node_infiniband_port_discards_transmitted_total", "ib_port_xmit_discards"),
        ("node_infiniband_link_error_recovery_total", "ib_link_error_recovery"),
        ("node_infiniband_symbol_error_total", "ib_symbol_errors"),
        ("node_network_receive_errs_total", "net_errors"),
        ("node_memory_MemAvailable_bytes", "mem_available"),
        ("node_load1", "node_load"),
        ("node_hwmon_temp_celsius", "hwmon_temp"),
        ("node_edac_csrow_uncorrectable_errors_total", "edac_uncorrectable"),
        ("node_edac_correctable_errors_total", "edac_correctable"),
        ("up", "health_up"),
        ("scrape_duration_seconds", "health_scrape_duration"),
        ("scrape_samples_scraped", "health_scrape_samples"),
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "clock_event_reasons"),
        ("DCGM_FI_DEV_ROW_REMAP_PENDING", "row_remap_pending"),
    ],
)
def test_major_node_exporter_and_dcgm_families_are_named(metric: str, signal: str) -> None:
    """The families that matter for GPU failure map to their named signal."""
    rule = load_signal_rules().rule_for(metric)
    assert rule is not None
    assert signal == rule.name


@pytest.mark.parametrize(
    "metric",
    [
        "go_goroutines",
        "process_cpu_seconds_total",
        "node_exporter_build_info",
        "node_uname_info",
        "promhttp_metric_handler_requests_total",
        "foo_created",
        "node_sysctl_fs_file_nr",
        "http_request_duration_seconds_bucket",
    ],
)
def test_self_and_metadata_metrics_are_ignored(metric: str) -> None:
    """Exporter self metrics, info metrics and constants are never scored."""
    assert "ignore" == load_signal_rules().classify(metric)


def test_counter_detection_for_default_rule() -> None:
    """Declared types win; else _total suffix and counter_patterns; untyped gauges stay gauges."""
    catalog = load_signal_rules()
    assert catalog.is_counter("node_vmstat_pgfault")
    assert catalog.is_counter("node_netstat_Tcp_InErrs", "untyped")
    assert not catalog.is_counter("node_netstat_Tcp_CurrEstab", "untyped")
    assert not catalog.is_counter("node_load5")
    assert not catalog.is_counter("odd_total", "gauge")
    assert catalog.is_counter("DCGM_FI_DEV_NVLINK_BANDWIDTH_L0")


def test_health_signals_are_named_health() -> None:
    """Every signal scored by the health scorer is named health_*; all scrape health is there."""
    catalog = load_signal_rules()
    health = {rule.name for rule in catalog.signals if "health" in rule.scorers}
    assert all(name.startswith("health_") for name in health)
    assert {"health_up", "health_scrape_duration", "health_scrape_samples"} <= health
    assert {"health_series_missing_fraction", "health_gpu_count"} <= health


def test_xid_catalog_covers_required_codes() -> None:
    """The XID catalog lists the codes the detector must understand, each with an action."""
    required = {
        13,
        31,
        32,
        38,
        43,
        45,
        48,
        56,
        57,
        61,
        62,
        63,
        64,
        68,
        69,
        74,
        79,
        92,
        94,
        95,
        109,
        110,
        119,
        120,
        121,
        123,
        136,
        140,
        143,
        154,
        155,
        156,
        157,
        158,
        159,
        162,
        163,
    } | set(range(144, 151))
    catalog = load_xid_catalog()
    assert required <= {rule.code for rule in catalog.xids}
    assert all(rule.action for rule in catalog.xids)


def test_xid_failure_semantics() -> None:
    """App faults and teardown are not failures; hardware XIDs are; 45 folds; 162/163 recover."""
    catalog = load_xid_catalog()
    assert not any(catalog.is_failure(code) for code in (13, 31, 43, 45))
    assert all(catalog.is_failure(code) for code in (48, 64, 74, 79, 95, 119))
    rule45 = catalog.get(45)
    assert rule45 is not None
    assert rule45.follows_within_s is not None
    recoveries = [catalog.get(code) for code in (162, 163)]
    assert all(rule is not None and rule.recovery for rule in recoveries)
    assert not catalog.is_failure(99999)


def test_xid_154_reads_the_recovery_action() -> None:
    """154 messages name the recovery action; "to None" means nothing is needed any more."""
    rule = load_xid_catalog().get(154)
    assert rule is not None
    reboot = rule.action_in(
        "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    )
    cleared = rule.action_in(
        "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
    )
    assert reboot is not None
    assert ("REBOOT", True) == (reboot.action, reboot.failure)
    assert cleared is not None
    assert ("IGNORE", False) == (cleared.action, cleared.failure)
    assert rule.action_in("") is None


def test_duplicate_xid_codes_are_rejected(tmp_path: Path) -> None:
    """Each XID code appears once."""
    entry = "  - {code: 79, name: x, severity: critical, action: REBOOT, failure: true}\n"
    with pytest.raises(ConfigError, match="xid 79 is listed twice"):
        load_xid_catalog(_write(tmp_path, "xids:\n" + entry + entry, "xid.yaml"))


def test_bad_xid_severity_names_field(tmp_path: Path) -> None:
    """XID entries are validated field by field."""
    entry = "  - {code: 79, name: x, severity: fatal, action: REBOOT, failure: true}\n"
    path = _write(tmp_path, "xids:\n" + entry, "xid.yaml")
    with pytest.raises(ConfigError, match=re.escape("xids[0].severity: must be one of critical")):
        load_xid_catalog(path)


def test_copied_catalog_uses_its_own_rules() -> None:
    """A catalog changed with model_copy (no validation pass) matches by its new rules."""
    catalog = load_signal_rules()
    only = catalog.model_copy(update={"signals": (catalog.signals[0],), "ignore": ()})
    assert only.rule_for("DCGM_FI_DEV_SM_CLOCK") is None
    assert "default" == only.classify("go_goroutines")
    assert catalog.rule_for("DCGM_FI_DEV_SM_CLOCK") is not None


def test_the_export_selector_keeps_what_the_rules_read_and_little_else(real_data: Path) -> None:
    """export_pattern (``detector export-selector``) matches every metric a rule names or
    matches, the XID sources, every DCGM field, the host- and pod-naming series; of the real
    node-exporter page it keeps the series a rule reads and leaves out the rest (here 95%)."""
    catalog, xids = load_signal_rules(), load_xid_catalog()
    selected = re.compile(export_pattern(catalog, xids))
    for rule in catalog.signals:
        assert all(selected.fullmatch(m) for m in rule.metrics), rule.name
    csv_dir = real_data / "exporters" / "dcgm"
    for field in _dcgm_fields(csv_dir / "default-counters.csv"):
        assert selected.fullmatch(field), field
    also = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT", "dcgm_gpu_temp")
    also += ("node_uname_info", "kube_pod_info", "node_infiniband_symbol_error_total")
    for name in also:
        assert selected.fullmatch(name), name
    page = (real_data / "exporters" / "node_exporter" / "e2e-output.txt").read_text()
    lines = [ln for ln in page.splitlines() if ln and not ln.startswith("#")]
    names = [re.split(r"[{ ]", ln, maxsplit=1)[0] for ln in lines]
    read = [n for n in names if catalog.rule_for(n) is not None]
    assert read
    assert all(selected.fullmatch(n) for n in read)
    kept = [n for n in names if selected.fullmatch(n)]
    assert len(kept) < 0.1 * len(names)
    assert not selected.fullmatch("node_cpu_seconds_total")
