"""Recovery analytics (replay/recovery.py, replay/retries.py), the job-attempts file
(ingest/jobs.py), the simulator's jobs (sim/jobs.py) and the report's recovery section."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from detector.cli.main import main
from detector.errors import JobsError
from detector.evaluation import AlertRow, Evaluation, concentration, evaluate, repeat_offenders
from detector.ingest import load_jobs, write_jobs
from detector.loop import Decision
from detector.model import Alert, JobAttempt, XidEvent
from detector.replay.recovery import Recovery, recovery_analysis
from detector.replay.report.recovery import recovery_section
from detector.replay.retries import retry_chains
from detector.sim import Scenario, SimulatedCluster

T0 = 1_735_689_600.0
H = 3600.0


def _attempt(
    job: str, n: int, start_h: float, end_h: float | None, status: int | None, **kw: object
) -> JobAttempt:
    nodes = kw.pop("nodes", ("n1", "n2"))
    automatic = kw.pop("automatic", n > 1)
    return JobAttempt(
        job=job,
        attempt=n,
        start=T0 + start_h * H,
        end=None if end_h is None else T0 + end_h * H,
        exit_status=status,
        nodes=tuple(nodes),  # type: ignore[arg-type]
        automatic=bool(automatic),
    )


def _xid(node: str, at_h: float, xid: int = 79, end_h: float | None = None) -> XidEvent:
    return XidEvent(T0 + at_h * H, node, "0", xid, None if end_h is None else T0 + end_h * H)


def _alert(node: str, start_h: float, matched: bool, signal: str = "ecc_dbe") -> AlertRow:
    alert = Alert(node, None, T0 + start_h * H, T0 + start_h * H + 600, 0.9, (signal,))
    return AlertRow(alert, matched)


# -- concentration ---------------------------------------------------------------------------


def test_top_k_share_counts_the_nodes_with_the_most() -> None:
    """Top 3 of 10 nodes with 5, 3, 2, 1, 1 failures hold 10 of 12: 83%; even share 30%."""
    c = concentration("failures", {"a": 5, "b": 3, "c": 2, "d": 1, "e": 1, "f": 0}, nodes=10)
    assert 12 == c.total
    assert [("a", 5), ("b", 3), ("c", 2), ("d", 1), ("e", 1)] == list(c.per_node)
    assert 10 / 12 == c.top_share(3)
    top = {t["k"]: t for t in c.to_json()["top"]}
    assert [1, 3, 5, 10] == sorted(top)
    assert (0.8333, 0.3, ["a", "b", "c"]) == (
        top[3]["share"],
        top[3]["even_share"],
        top[3]["nodes"],
    )
    assert 1.0 == top[10]["share"]


def test_concentration_of_nothing_has_no_share() -> None:
    """No events: no share (None, not 0 or NaN), and a cluster of 2 lists only k=1."""
    c = concentration("exclusions", {}, nodes=2)
    assert None is c.top_share(3)
    assert [{"k": 1, "share": None, "even_share": 0.5, "nodes": []}] == c.to_json()["top"]


@dataclasses.dataclass
class FakeReplay:
    """What recovery_analysis reads of a replay, built by hand."""

    node_names: tuple[str, ...]
    failures: list[XidEvent]
    actions: list[Decision]
    evaluation: Evaluation = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.evaluation = evaluate([], self.failures, start=T0, end=T0 + 48 * H)


def test_exclusions_count_what_was_excluded_or_would_have_been() -> None:
    """Exclusions (dry-run or carried out) are counted per node; refused ones and releases are
    not; with no exclusion at all there is no exclusions row."""

    def decision(node: str, **kw: object) -> Decision:
        return Decision("exclude", node, T0, "xid 79", f"id-{node}", **kw)  # type: ignore[arg-type]

    actions = [
        decision("a", dry_run=True),
        decision("a", dry_run=True),
        decision("b"),
        decision("c", refused="rate_cap"),
        Decision("release", "a", T0 + H, "by hand", "id-a", by="ops"),
    ]
    nodes = (*(f"n{i}" for i in range(60)), "a", "b", "c")
    found = recovery_analysis(FakeReplay(nodes, [_xid("a", 1.0)], actions), None)
    assert ["exclusions", "failures", "alerts"] == [c.what for c in found.concentration]
    excluded = found.concentration[0]
    assert ((("a", 2), ("b", 1)), 63, 1.0) == (
        excluded.per_node,
        excluded.nodes,
        excluded.top_share(3),
    )
    quiet = recovery_analysis(FakeReplay(nodes, [], []), None)
    assert ["failures", "alerts"] == [c.what for c in quiet.concentration]
    assert "study: the top 3 of 63 nodes" in quiet.to_json()["concentration_reference"]["text"]


# -- repeat offenders ------------------------------------------------------------------------


def test_two_failures_recommend_replace_and_one_xid_burst_is_one_failure() -> None:
    """Two failures a day apart say replace; 119 then 120 two minutes later is one failure."""
    failures = [
        _xid("twice", 1.0, 79, end_h=5.0),
        _xid("twice", 30.0, 48, end_h=34.0),
        _xid("burst", 2.0, 119),
        _xid("burst", 2.03, 120),
    ]
    found = {o.node: o for o in repeat_offenders(failures, [])}
    assert ["twice"] == list(found)
    assert ("replace", (79, 48)) == (found["twice"].recommendation, found["twice"].xids)


def test_alerted_again_after_a_failure_recommends_keep_excluded() -> None:
    """One failure, then an unmatched alert after it: keep excluded; alerts before it: inspect."""
    failures = [_xid("sick", 10.0), _xid("fine", 10.0)]
    alerts = [
        _alert("sick", 9.5, matched=True),
        _alert("sick", 20.0, matched=False),
        _alert("fine", 9.0, matched=True),
        _alert("fine", 9.5, matched=True),
    ]
    found = {o.node: o.recommendation for o in repeat_offenders(failures, alerts)}
    assert {"sick": "keep excluded", "fine": "inspect"} == found


def test_false_alarms_alone_recommend_inspect_naming_the_usual_signal() -> None:
    """A node with 3 unmatched alerts and no failure: inspect, its leading signal named; a node
    with a single alert is no repeat offender."""
    alerts = [
        _alert("noisy", 1.0, False, "gpu_temp"),
        _alert("noisy", 5.0, False, "gpu_temp"),
        _alert("noisy", 9.0, False, "power"),
        _alert("once", 3.0, False),
    ]
    [offender] = repeat_offenders([], alerts)
    assert ("noisy", "inspect", 3, "gpu_temp") == (
        offender.node,
        offender.recommendation,
        offender.false_positives,
        offender.leading_signal,
    )
    assert "check gpu_temp" in offender.reason


# -- retry chains ----------------------------------------------------------------------------


def test_chain_success_rates_split_automatic_from_manual() -> None:
    """Automatic chains: 1 succeeded, 1 given up, 1 still running (left out): 50%; manual: 1 of
    1 given up: 0%; a chain with both kinds of restart is mixed."""
    attempts = [
        _attempt("auto-ok", 1, 0, 1, 1),
        _attempt("auto-ok", 2, 1.2, 5, 0),
        _attempt("auto-bad", 1, 0, 1, 1),
        _attempt("auto-bad", 2, 1.2, 2, 1),
        _attempt("auto-bad", 3, 2.2, 3, 1),
        _attempt("auto-open", 1, 0, 1, 1),
        _attempt("auto-open", 2, 1.2, None, None),
        _attempt("manual-bad", 1, 0, 1, 1),
        _attempt("manual-bad", 2, 3, 4, 1, automatic=False),
        _attempt("mixed", 1, 0, 1, 1),
        _attempt("mixed", 2, 2, 3, 1, automatic=False),
        _attempt("mixed", 3, 3.2, 4, 0, automatic=True),
        _attempt("single-ok", 1, 0, 4, 0),
        _attempt("dropped", 1, 0, 2, 1),
    ]
    r = retry_chains(attempts, [])
    auto, manual, mixed = (r.by_kind[k] for k in ("automatic", "manual", "mixed"))
    assert (3, 7, 1, 1, 1, 0.5) == (
        auto.chains,
        auto.attempts,
        auto.succeeded,
        auto.failed,
        auto.unfinished,
        auto.success_rate,
    )
    assert (1, 0.0) == (manual.chains, manual.success_rate)
    assert (1, 1.0) == (mixed.chains, mixed.success_rate)
    assert (7, 14, 1) == (r.jobs, r.attempts, r.not_restarted)
    # unrestarted failures: auto-bad's last, manual-bad's last, dropped's only
    assert 3 == r.unrestarted_failures


def test_retry_intervals_have_median_and_quartiles_by_kind() -> None:
    """Restart gaps of 10, 11, 11 min (automatic) and 60 min (manual): median 11 min, IQR
    10.75-23.25 min (numpy's linear quartiles)."""
    attempts = [
        _attempt("a", 1, 0, 1, 1),
        _attempt("a", 2, 1 + 10 / 60, 2, 1),
        _attempt("a", 3, 2 + 11 / 60, 3, 1),
        _attempt("a", 4, 3 + 11 / 60, 4, 0),
        _attempt("m", 1, 0, 1, 1),
        _attempt("m", 2, 2, 3, 0, automatic=False),
    ]
    r = retry_chains(attempts, [])
    spread = r.interval_s
    assert (4, 660.0, 645.0, 1395.0) == (
        spread.count,
        round(spread.median or 0, 6),
        round(spread.p25 or 0, 6),
        round(spread.p75 or 0, 6),
    )
    auto, manual = r.interval_by_kind_s["automatic"], r.interval_by_kind_s["manual"]
    assert (3, 660.0) == (auto.count, round(auto.median or 0, 6))
    assert (1, 3600.0) == (manual.count, round(manual.median or 0, 6))


def test_time_lost_runs_from_the_xid_to_the_restart_and_same_node_refailures_are_named() -> None:
    """A failure XID 20 min before the attempt's end and a restart 10 min after it: 30 min lost,
    times 2 nodes; a chain failing twice on n2 is a same-node refailure."""
    attempts = [
        _attempt("j", 1, 0, 2, 1),
        _attempt("j", 2, 2 + 10 / 60, 5, 1),
        _attempt("j", 3, 5.5, 8, 0),
    ]
    failures = [_xid("n2", 2 - 20 / 60), _xid("n2", 4.5), _xid("other", 1.0)]
    r = retry_chains(attempts, failures)
    assert (2, 1800.0 + 3600.0) == (r.lost_s.count, round(r.lost_s.total, 6))
    assert round((1800.0 + 3600.0) * 2 / 3600, 6) == round(r.lost_node_s / 3600, 6)
    assert (("j", "n2"),) == r.same_node


# -- the job-attempts file -------------------------------------------------------------------


def _lines(path: Path, *records: object) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


GOOD = {
    "job": "j1",
    "attempt": 1,
    "start": "2025-01-01T00:00:00Z",
    "end": 1735693200,
    "exit_status": 1,
    "nodes": ["n1"],
    "automatic": False,
}


def test_jobs_file_round_trips_and_accepts_session_and_running_attempts(tmp_path: Path) -> None:
    """write_jobs then load_jobs gives the attempts back; 'session' names the job; a running
    attempt has no end and no exit status; comments and blank lines are skipped."""
    attempts = [
        _attempt("x", 1, 0, 1, 1),
        _attempt("x", 2, 1.2, None, None, nodes=("n3",)),
    ]
    assert 2 == write_jobs(tmp_path / "j.jsonl.gz", attempts)
    assert attempts == load_jobs(tmp_path / "j.jsonl.gz")
    running = {"session": "s9", "attempt": 1, "start": T0, "nodes": ["a"]}
    path = _lines(tmp_path / "s.jsonl", "# exported", "", running)
    assert [JobAttempt("s9", 1, T0, None, None, ("a",), False)] == load_jobs(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"job": None}, "field 'job': expected a non-empty string, got None"),
        ({"attempt": 0}, "field 'attempt': expected a positive integer, got 0"),
        ({"start": "2025-01-01T00:00"}, "field 'start': '2025-01-01T00:00' has no UTC offset"),
        ({"end": T0 - 10}, "field 'end': end 1735689590.0 is before start"),
        ({"exit_status": "failed"}, "field 'exit_status': expected an integer exit status or null"),
        ({"exit_status": None}, "field 'exit_status': missing for an attempt that ended"),
        ({"nodes": []}, "field 'nodes': expected a non-empty list of node names"),
        ({"nodes": ["ok", ""]}, "field 'nodes': expected node names (non-empty strings)"),
        ({"automatic": "yes"}, "field 'automatic': expected true or false, got 'yes'"),
    ],
)  # fmt: skip
def test_a_bad_jobs_line_names_file_line_and_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    """The first bad line raises JobsError naming the file, the line and the field."""
    path = _lines(tmp_path / "j.jsonl", {**GOOD, "job": "j0"}, {**GOOD, **change})
    with pytest.raises(JobsError) as raised:
        load_jobs(path)
    assert str(raised.value).startswith(f"{tmp_path}/j.jsonl:2: {message}")


def test_a_missing_field_a_repeated_attempt_and_broken_json_are_refused(tmp_path: Path) -> None:
    """No nodes, the same attempt twice, and a line that is not JSON: each named by line."""
    missing = {k: v for k, v in GOOD.items() if k != "nodes"}
    cases = [
        ([missing], "j.jsonl:1: field 'nodes': missing"),
        ([GOOD, GOOD], "j.jsonl:2: field 'attempt': attempt 1 of job 'j1' is already on line 1"),
        ([GOOD, "{not json"], "j.jsonl:2: not valid JSON"),
    ]
    for records, message in cases:
        path = _lines(tmp_path / "j.jsonl", *records)
        with pytest.raises(JobsError) as raised:
            load_jobs(path)
        assert str(raised.value).startswith(f"{tmp_path}/{message}"), str(raised.value)


def test_an_unreadable_jobs_file_is_named(tmp_path: Path) -> None:
    """A path that does not exist: JobsError naming it."""
    with pytest.raises(JobsError, match=r"nope\.jsonl: cannot read job-attempts file"):
        load_jobs(tmp_path / "nope.jsonl")


# -- the simulator's jobs --------------------------------------------------------------------


def test_simulated_jobs_restart_after_each_failure_without_the_node_in_repair() -> None:
    """The demo's attempts: each failed attempt is followed by the same session's next attempt
    that leaves out the failed node, and some chains fail more than once."""
    cluster = SimulatedCluster(Scenario.demo())
    attempts = cluster.job_attempts()
    sessions: dict[str, list[JobAttempt]] = {}
    for a in attempts:
        sessions.setdefault(a.job, []).append(a)
    failed = [a for a in attempts if a.failed]
    assert failed
    for a in failed:
        chain = sessions[a.job]
        if a.attempt == len(chain):
            continue  # the job's members were all in repair until the scenario ended
        restart = chain[a.attempt]
        culprit = next(
            f for f in cluster.failures
            if cluster.scenario.node_name(f.node) in a.nodes
            and a.start <= cluster.scenario.start + f.time <= (a.end or 0)
        )  # fmt: skip
        assert cluster.scenario.node_name(culprit.node) not in restart.nodes
        assert restart.start >= (a.end or 0)
    assert max(sum(x.failed for x in chain) for chain in sessions.values()) >= 2
    assert {False, True} == {a.automatic for a in attempts if a.attempt > 1}


def test_simulate_writes_the_jobs_file_replay_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simulate --jobs` writes the cluster's attempts; `replay DUMP --jobs` analyses exactly
    them in the report JSON and the HTML report's recovery section, and warns when the file
    names nodes the data lacks."""
    dump, events, jobs = tmp_path / "d.om", tmp_path / "e.jsonl", tmp_path / "j.jsonl"
    args = ["--nodes", "4", "--days", "0.3", "--seed", "5"]
    assert 0 == main(
        ["simulate", *args, "--failures", "2", "--out", str(dump), "--events", str(events),
         "--jobs", str(jobs)]
    )  # fmt: skip
    scenario = dataclasses.replace(
        Scenario(), nodes=4, days=0.3, seed=5, gpus=8, step_s=30.0, failure_count=2
    )
    expected = SimulatedCluster(scenario).job_attempts()
    assert sorted(expected, key=lambda a: (a.job, a.attempt)) == load_jobs(jobs)
    report, html = tmp_path / "r.json", tmp_path / "r.html"
    assert 0 == main(
        ["replay", str(dump), "--events", str(events), "--jobs", str(jobs), "--quiet",
         "--report-json", str(report), "--html", str(html)]
    )  # fmt: skip
    recovery = json.loads(report.read_text())["recovery"]
    assert len(expected) == recovery["retry_chains"]["attempts"]
    assert "failures" in recovery["concentration"]
    page = html.read_text("utf-8")
    assert "<section id=recovery>" in page
    assert "<table class=chains>" in page
    warning = "node(s) of the job-attempts file are not in the data"
    assert warning not in capsys.readouterr().err
    renamed = [dataclasses.replace(a, nodes=("gpu-99",)) for a in expected]
    write_jobs(jobs, renamed)
    assert 0 == main(
        ["replay", str(dump), "--events", str(events), "--jobs", str(jobs), "--quiet"]
    )  # fmt: skip
    assert f"1 {warning}: gpu-99 (its nodes are named like node-01)" in capsys.readouterr().err


def test_a_dump_replay_without_jobs_says_how_to_get_retry_chains() -> None:
    """Without a job-attempts file the section still shows concentration and offenders, and
    says which flag adds the retry chains."""
    page = recovery_section(Recovery((concentration("failures", {"a": 2}, 4),), (), None))
    assert "<table class=concentration>" in page
    assert "give <code>--jobs FILE</code>" in page
    assert None is Recovery((), (), None).to_json()["retry_chains"]


def test_replay_refuses_a_bad_jobs_file_before_replaying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`replay --jobs` with a bad line exits 2 naming file, line and field."""
    path = _lines(tmp_path / "j.jsonl", GOOD, {**GOOD, "attempt": 2, "nodes": "n1"})
    assert 2 == main(["replay", "--jobs", str(path), "--quiet", "--days", "0.01"])
    assert f"{path}:2: field 'nodes': expected a non-empty list" in capsys.readouterr().err
