"""The one tick loop that ``detector run``, ``replay`` and ``calibrate`` all drive.

Each driver owns only its clock, its sources and its sinks; whatever decides an alert runs
here, once per tick, in this order:

1. the pipeline scores the frame (``Pipeline.step``: signals, scorers, fusion, alert scores)
   and reports the XIDs the data showed (the DCGM gauge);
2. every XID of the tick, the data's and those the driver brings (the kernel log in ``run``,
   an events file in ``replay``), is judged by one rule (``pipeline.is_failure``); failure
   XIDs force their node's alert (``NodeAlerts``), and so does definitive structural evidence
   (``TickResult.definitive``: a GPU gone from a page its exporter still serves);
3. the alert episodes advance (``NodeAlerts``: thresholds, minimum duration, hysteresis,
   cooldown, the evidence at each peak); each alert is diagnosed once, when it starts
   (``diagnosis.diagnose`` on its leading signals with their values, the model built from
   rules/diagnosis.yaml and the calibration file): the class, confidence and action it
   keeps for its lifetime (``LoopTick.diagnoses``, the state file);
4. the alert policy decides the notifications Alertmanager gets (``AlertPolicy``: labels,
   the diagnosis' failure_class and action among them, severity, resend, storm breaker,
   suppressions, maintenance, shadow mode) and groups what moves cluster-wide into cluster
   incidents (``IncidentTracker``), each diagnosed with its checkpoint-storm bottleneck from
   the NFS figures of the raw frames (``StormMeter``, fed every tick before the policy
   decides);
5. live accounting counts what was notified against the failure XIDs (TP/FP, lead times),
   and the recovery log keeps what the recovery figures are computed from (failures and
   exclusions per node, repeat offenders: ``evaluation.RecoveryLog``);
6. when ``actions`` are enabled, the action engine decides which node to exclude
   (``ActionEngine``: failure XIDs and notified alerts held long enough; caps, breaker,
   dry-run, never in shadow mode). ``run`` hands the decisions to an executor (Kubernetes,
   Slurm, a webhook); ``replay`` lists them.

What a driver does with ``LoopTick.notifications`` is its own business: ``run`` queues them for
Alertmanager, ``replay`` keeps them for its report. An alert counts (``LoopTick.notified``,
``sent_alerts``) once the policy first notified it: what ``run`` would have sent, so the
replay report, the calibration fit and the live accounting count the same alerts.
Steps 2-5 are ``Decisions``; calibration re-runs them over a ``Recording`` of a replay's
scores to try thresholds without re-scoring (``Recording.decide``): the same code.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import AlertsConfig, Calibration, Config, XidCatalog
from ..diagnosis import Diagnosis, DiagnosisModel, diagnosis_model
from ..evaluation import Detection, LiveAccounting, RecoveryLog
from ..model import Alert, FloatArray, Frame, Incident, SignalScore, XidEvent
from ..pipeline import Pipeline, TickResult, build_pipeline, dedupe_episodes, is_failure
from ..series import SeriesIndex
from .action_records import Candidate, Decision
from .actions import ActionEngine
from .alerts import Evidence, EvidenceFn, NodeAlerts, leading_gpu
from .diagnoses import AlertDiagnoses, AlertKey, SignalScoresFn
from .episodes import EpisodeParams
from .incidents import ClusterIncident
from .notification import Notification
from .policy import FAILURE_ALERT, AlertPolicy
from .storm_meter import StormMeter

STATE_VERSION = 1


@dataclass(frozen=True, slots=True)
class LoopTick:
    """What one tick decided; ``scores`` is the pipeline's result."""

    scores: TickResult
    started: tuple[Alert, ...]  # episodes that began firing (notified or not)
    ended: tuple[Alert, ...]  # episodes that resolved
    ended_sent: tuple[Alert, ...]  # of ``ended``, those that had been notified
    notifications: tuple[Notification, ...]  # for Alertmanager (none are sent in shadow mode)
    notified: tuple[Alert, ...]  # episodes notified for the first time this tick
    xids: tuple[XidEvent, ...]  # every XID of the tick, the data's and the driver's
    new_failures: tuple[XidEvent, ...]  # failure XID episodes that began this tick
    detections: tuple[Detection, ...]  # failures the accounting credited this tick
    actions: tuple[Decision, ...] = ()  # the action engine's decisions (actions enabled)
    # alerts diagnosed this tick (those that started), by (node, start); kept for their life
    diagnoses: Mapping[AlertKey, Diagnosis] = field(default_factory=dict)
    open_incident: ClusterIncident | None = None  # the cluster incident open after this tick
    closed_incidents: tuple[ClusterIncident, ...] = ()  # closed this tick, final bottleneck

    @property
    def time(self) -> float:
        return self.scores.time

    @property
    def node_names(self) -> tuple[str, ...]:
        return self.scores.node_names

    @property
    def node_score(self) -> FloatArray:
        return self.scores.node_score

    @property
    def incidents(self) -> tuple[Incident, ...]:
        return self.scores.incidents


class Decisions:
    """Steps 2-5 of the module docstring: from a tick's scores, XIDs and incidents to alert
    episodes, notifications and accounting."""

    def __init__(
        self,
        catalog: XidCatalog,
        *,
        episodes: EpisodeParams,
        policy: AlertPolicy,
        accounting: LiveAccounting,
        alert_on_xid: bool = True,
        xid_hold_s: float = AlertsConfig().xid_hold_s,
        actions: ActionEngine | None = None,
        diagnosis: DiagnosisModel | None = None,
    ) -> None:
        self.catalog = catalog
        self.actions = actions
        self.policy = policy
        self.accounting = accounting
        self.diagnosis = diagnosis  # None: alerts go undiagnosed (a loop built by hand)
        self.diagnoses = AlertDiagnoses(diagnosis)
        self.alerts = NodeAlerts(episodes, xid_hold_s=xid_hold_s, alert_on_xid=alert_on_xid)
        self._settings = (policy.settings(), accounting.horizon_s, accounting.grace_s)
        self.storms = StormMeter()  # fed the raw frames by TickLoop.step
        self.recovery = RecoveryLog(accounting.horizon_s, accounting.grace_s)
        self._sent: set[AlertKey] = set()  # open episodes the policy notified
        self._recent_failures: list[XidEvent] = []

    @classmethod
    def from_config(
        cls,
        config: Config,
        catalog: XidCatalog,
        episodes: EpisodeParams,
        diagnosis: DiagnosisModel | None = None,
    ) -> Decisions:
        al = config.alerts
        return cls(
            catalog,
            episodes=episodes,
            diagnosis=diagnosis,
            policy=AlertPolicy.from_config(al, catalog.is_failure, diagnosis),
            accounting=LiveAccounting(config.evaluation.horizon_s, config.evaluation.grace_s),
            alert_on_xid=al.alert_on_xid,
            xid_hold_s=al.xid_hold_s,
            actions=ActionEngine(config.actions) if config.actions.enabled else None,
        )

    @property
    def threshold(self) -> float:
        return self.alerts.params.threshold

    def fresh(self, episodes: EpisodeParams) -> Decisions:
        """New decisions with these settings but ``episodes`` and no state (calibration)."""
        policy, horizon_s, grace_s = self._settings
        return Decisions(
            self.catalog,
            episodes=episodes,
            policy=AlertPolicy(**policy),
            accounting=LiveAccounting(horizon_s, grace_s),
            alert_on_xid=self.alerts.alert_on_xid,
            xid_hold_s=self.alerts.xid_hold_s,
            diagnosis=self.diagnosis,
        )

    def decide(
        self,
        tick: TickResult,
        xids: tuple[XidEvent, ...],
        evidence: EvidenceFn,
        muted: Collection[str] = frozenset(),
        signal_scores: SignalScoresFn | None = None,
    ) -> LoopTick:
        """Steps 2-5 for one scored tick; ``xids`` is every XID of the tick;
        ``signal_scores``: a node's leading columns with their values, what a diagnosis
        reads (None: an alert's signal names alone, as calibration records them)."""
        t = tick.time
        failing = [e for e in xids if is_failure(e, self.catalog)]
        changes = self.alerts.update(
            t, tick.node_names, tick.node_score, failing, evidence, tick.definitive
        )
        open_alerts = self.alerts.open_alerts()
        started = (*changes.started, *open_alerts)
        diagnosed = self.diagnoses.update(tick.node_names, started, signal_scores)
        n_seen = int(np.count_nonzero(~np.isnan(tick.node_score)))
        notes = self.policy.update(
            t,
            n_seen,
            open_alerts,
            changes.ended,
            tick.incidents,
            muted,
            self.diagnoses.open,
            self.storms,
        )
        notified, ended_sent = self._track_sent(notes, open_alerts, changes.ended)
        self.diagnoses.keep(open_alerts)
        new_failures = self._new_failures(failing, t)
        detections = self.accounting.update(t, notified, new_failures)
        actions = self._act(tick, failing, n_seen) if self.actions is not None else []
        excluded = [d.node for d in actions if d.action == "exclude" and d.refused is None]
        self.recovery.update(t, len(tick.node_names), notified, new_failures, excluded)
        return LoopTick(
            scores=tick,
            started=changes.started,
            ended=changes.ended,
            ended_sent=ended_sent,
            notifications=tuple(notes),
            notified=notified,
            xids=xids,
            new_failures=tuple(new_failures),
            detections=tuple(detections),
            actions=tuple(actions),
            diagnoses=diagnosed,
            open_incident=self.policy.open_incident(),
            closed_incidents=tuple(self.policy.closed_incidents),
        )

    def diagnosis_of(self, alert: Alert) -> Diagnosis | None:
        """The diagnosis an open alert has kept since it started (None: no model)."""
        return self.diagnoses.of(alert)

    def _act(self, tick: TickResult, failing: Sequence[XidEvent], n_seen: int) -> list[Decision]:
        """Step 6: the failure XIDs and the notified alerts (with their score this tick) as
        the action engine's candidates."""
        assert self.actions is not None
        index = {name: i for i, name in enumerate(tick.node_names)}
        scores = tick.node_score
        candidates = [Candidate.from_xid(e, self.diagnoses.class_of_xid(e.xid)) for e in failing]
        for alert in self.open_sent_alerts():
            i = index.get(alert.node)
            score = float(scores[i]) if i is not None and i < scores.shape[0] else float("nan")
            found = self.diagnosis_of(alert)
            failure_class = found.failure_class if found is not None else None
            candidates.append(Candidate.from_alert(alert, score, failure_class=failure_class))
        n_nodes = n_seen or len(tick.node_names)
        return self.actions.update(tick.time, candidates, n_nodes, self.policy.shadow)

    def _track_sent(
        self, notes: Sequence[Notification], open_alerts: Sequence[Alert], ended: Sequence[Alert]
    ) -> tuple[tuple[Alert, ...], tuple[Alert, ...]]:
        """(open episodes the policy notified for the first time this tick, ended episodes
        that had been notified)."""
        firing = {
            (labels["node"], note.starts_at)
            for note in notes
            if note.ends_at is None
            and (labels := dict(note.labels)).get("alertname") == FAILURE_ALERT
        }
        notified = tuple(
            a
            for a in open_alerts
            if (a.node, a.start) in firing and (a.node, a.start) not in self._sent
        )
        self._sent.update((a.node, a.start) for a in notified)
        ended_sent = tuple(a for a in ended if (a.node, a.start) in self._sent)
        self._sent.difference_update((a.node, a.start) for a in ended)
        return notified, ended_sent

    def open_sent_alerts(self) -> list[Alert]:
        """Open alerts that have been notified."""
        return [a for a in self.alerts.open_alerts() if (a.node, a.start) in self._sent]

    def _new_failures(self, failing: Sequence[XidEvent], now: float) -> list[XidEvent]:
        """Failure XIDs that start a new episode. The same failure can arrive twice (the DCGM
        gauge names the GPU, the kernel log may not): accounting is per node, so episodes
        are keyed by node and code."""
        window = self.catalog.episode_window_s
        per_node = [  # end kept: an XID the gauge showed after a gap matches until then
            XidEvent(e.time, e.node, None, e.xid, end=e.end, source=e.source, message=e.message)
            for e in failing
        ]
        recent = [e for e in self._recent_failures if now - e.time <= window]
        before = {(e.node, e.xid, e.time) for e in dedupe_episodes(recent, self.catalog)}
        recent.extend(per_node)
        self._recent_failures = recent
        after = dedupe_episodes(recent, self.catalog)
        return [e for e in after if (e.node, e.xid, e.time) not in before]

    def state_dict(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        arrays, alerts_meta = self.alerts.state_dict()
        meta = {
            "alerts": alerts_meta,
            "sent": [[node, start] for node, start in sorted(self._sent)],
            "policy": self.policy.state_dict(),
            "accounting": self.accounting.state_dict(),
            "diagnoses": self.diagnoses.state_dict(),
            "recovery": self.recovery.state_dict(),
        }
        if self.actions is not None:
            meta["actions"] = self.actions.state_dict()
        return arrays, meta

    def load_state_dict(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        self.alerts.load_state_dict(arrays, meta["alerts"])
        self._sent = {(str(node), float(start)) for node, start in meta["sent"]}
        self.policy.load_state_dict(meta["policy"])
        self.accounting.load_state_dict(meta["accounting"])
        self.diagnoses.load_state_dict(meta.get("diagnoses", []))  # none in an older state
        if isinstance(meta.get("recovery"), dict):
            self.recovery.load_state_dict(meta["recovery"])
        if self.actions is not None and isinstance(meta.get("actions"), dict):
            self.actions.load_state_dict(meta["actions"])


class TickLoop:
    """The pipeline and the decisions; see the module docstring. Build one with
    ``from_config`` (the same for ``run``, ``replay`` and ``calibrate``)."""

    def __init__(self, pipeline: Pipeline, decisions: Decisions) -> None:
        self.pipeline = pipeline
        self.decisions = decisions

    @classmethod
    def from_config(
        cls,
        config: Config,
        index: SeriesIndex,
        calibration: Calibration | None = None,
        *,
        signal_weights: Mapping[str, float] | None = None,
    ) -> TickLoop:
        """The loop ``config`` describes on ``index`` (see ``build_pipeline``)."""
        pipeline = build_pipeline(config, index, calibration, signal_weights=signal_weights)
        episodes = episode_params(config, calibration)
        model = diagnosis_model(
            pipeline.signal_map.catalog,
            pipeline.xid_catalog,
            calibration,
            docs_url=config.alerts.docs_url,
        )
        decisions = Decisions.from_config(config, pipeline.xid_catalog, episodes, model)
        return cls(pipeline, decisions)

    @property
    def policy(self) -> AlertPolicy:
        return self.decisions.policy

    @property
    def accounting(self) -> LiveAccounting:
        return self.decisions.accounting

    @property
    def threshold(self) -> float:
        return self.decisions.threshold

    def step(
        self,
        frame: Frame,
        *,
        xids: Sequence[XidEvent] = (),
        muted: Collection[str] = frozenset(),
    ) -> LoopTick:
        """One tick: score ``frame``, then decide (``Decisions.decide``) with the data's XIDs
        and ``xids`` (the driver's: kernel log, events file); ``muted``: nodes under
        maintenance."""
        tick = self.pipeline.step(frame)
        pipeline, threshold = self.pipeline, self.threshold
        self.decisions.storms.observe(tick.time, frame.values, pipeline.index.infos, tick.incidents)

        def evidence(node: int) -> Evidence:
            signals, gpu = pipeline.peak_evidence(tick, node)
            return signals, leading_gpu(tick, node, threshold) or gpu

        def signal_scores(node: int) -> tuple[SignalScore, ...]:
            return pipeline.node_evidence(tick, node)

        return self.decisions.decide(
            tick, (*tick.xids, *xids), evidence, muted, signal_scores=signal_scores
        )

    def open_alerts(self) -> list[Alert]:
        return self.decisions.alerts.open_alerts()

    def open_sent_alerts(self) -> list[Alert]:
        return self.decisions.open_sent_alerts()

    def state_dict(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, JSON-able metadata): the pipeline, the alert episodes, the policy's
        tracking and the accounting: what a restarted ``run`` needs to carry on."""
        arrays, pipeline_meta = self.pipeline.state_dict()
        decision_arrays, decisions_meta = self.decisions.state_dict()
        arrays.update({f"alerts/{k}": v for k, v in decision_arrays.items()})
        meta = {"version": STATE_VERSION, "pipeline": pipeline_meta, **decisions_meta}
        return arrays, meta

    def load_state_dict(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Restore ``state_dict`` output into a freshly built loop. Raises ValueError,
        KeyError or TypeError naming what does not fit (callers start clean then)."""
        if meta.get("version") != STATE_VERSION:
            raise ValueError(f"loop state version {meta.get('version')!r}, expected 1")
        self.pipeline.load_state_dict(
            {k: v for k, v in arrays.items() if not k.startswith("alerts/")}, meta["pipeline"]
        )
        self.decisions.load_state_dict(
            {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("alerts/")}, meta
        )


def episode_params(config: Config, calibration: Calibration | None = None) -> EpisodeParams:
    """The alert episodes ``config.alerts`` asks for, at the threshold in force: the
    config's, else the calibration file's, else the uncalibrated default (the one place
    every driver and bench builds them from the config)."""
    al = config.alerts
    threshold = al.resolve_threshold(calibration.threshold if calibration is not None else None)
    return EpisodeParams(
        threshold,
        al.clear_ratio,
        al.min_duration_s,
        al.cooldown_s,
        clear_duration_s=al.clear_duration_s,
        restart_after_s=config.evaluation.horizon_s,
        min_observations=al.min_observations,
    )
