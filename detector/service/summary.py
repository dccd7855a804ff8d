"""An agent's summary of its node for a fleet: GET /summary, a Prometheus exposition.

Version 1 (``detector_summary_info{version="1"}``; a change of meaning takes a new version; a
fleet does not check it yet).
Per node the process scores (an agent: its own), from its latest tick:

- ``detector_summary_signal{node, signal, series}``: the value this tick of every node-level
  column of a named rule (rules/signals.yaml), as the agent computed it (the rule's transform
  applied: a counter's rate, a ratio, a log unit), NaN columns left out. ``signal`` is the
  rule's name, ``series`` the source series (``metric{label=value,...}`` without ``node``; ""
  for a computed column: GPU count, frozen exporters). Series no rule names (2,700 of the real
  node-exporter page's 3,027) stay with the agent, which scores them against their own past
  (its node has no peers): a fleet does not compare them across nodes (``default_rule``).
- ``detector_summary_gpu_score{node, gpu}``: each GPU's fused score in [0, 1] (the agent's
  GPU-against-GPU peers and the GPU's own past), GPUs that sent nothing left out.
- ``detector_summary_xid{node, gpu, err_msg}``: the last XID code the agent saw on each GPU
  (the DCGM gauge's and the kernel log's; 0 before the first), sticky like dcgm-exporter's
  ``DCGM_FI_DEV_XID_ERRORS``, whose semantics a fleet reads it with: a change is a new XID.

A fleet scraping these pages (or receiving them by remote write) scores them on the same
series index and tick as raw pages (``config.SUMMARY_SIGNAL_METRIC``, rules/signals.yaml's
``agent_gpu_score``, rules/xid.yaml): node-level values against the cohort and their own past,
GPU scores fused as given. The node score and the leading signals are on /metrics
(``detector_node_score``, ``detector_signal_score``); the summary carries only what a fleet
scores. A separate path because a fleet parses every line it scrapes: /metrics' self metrics
would cost it more than the summary itself, and Prometheus scrapes it only when asked
(``metrics_path: /summary``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ..config import SUMMARY_PREFIX, SUMMARY_SIGNAL_METRIC
from ..loop import LoopTick
from ..model import ColumnLayout, XidEvent
from ..pipeline import Pipeline

__all__ = ["SUMMARY_PATH", "SUMMARY_VERSION", "Summary"]

SUMMARY_PATH = "/summary"
SUMMARY_VERSION = "1"


class Summary:
    """The /summary page's collector (its own registry); ``observe`` each tick."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._tick: LoopTick | None = None
        self._pipeline: Pipeline | None = None
        self._xids: dict[tuple[str, str], XidEvent] = {}  # (node, gpu) -> the last XID
        self._layout: ColumnLayout | None = None  # the layout _columns was built for
        self._columns: list[tuple[int, str, str, str]] = []  # (column, node, signal, series)
        self.registry.register(self)

    def observe(self, tick: LoopTick, pipeline: Pipeline) -> None:
        """The latest tick (read when /summary is fetched) and its XIDs."""
        self._tick, self._pipeline = tick, pipeline
        for event in tick.xids:
            if event.gpu is not None:
                self._xids[(event.node, event.gpu)] = event

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def _node_columns(self, pipeline: Pipeline) -> list[tuple[int, str, str, str]]:
        """The node-level columns of named rules with their labels, rebuilt when the layout
        changes."""
        layout = pipeline.signal_map.layout
        if layout is not self._layout:
            infos, catalog = pipeline.index.infos, pipeline.signal_map.catalog
            out = []
            for col in np.flatnonzero(layout.gpu < 0).tolist():
                signal, node, _, series = pipeline.signal_map.column_names(col)
                if catalog.rule_named(signal) is None:
                    continue
                source = ""
                if series >= 0:
                    info = infos[series]
                    labels = ",".join(f"{k}={v}" for k, v in info.labels if k != "node")
                    source = f"{info.metric}{{{labels}}}" if labels else info.metric
                out.append((col, node, signal, source))
            self._layout, self._columns = layout, out
        return self._columns

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            SUMMARY_PREFIX + "info",
            "Version of this summary's format (docs/deploy.md, Agents feeding a fleet).",
            labels=["version"],
        )
        info.add_metric([SUMMARY_VERSION], 1.0)
        yield info
        signal = GaugeMetricFamily(
            SUMMARY_SIGNAL_METRIC,
            "A node-level signal's value this tick, as the rule named by signal computed it "
            "from the source series.",
            labels=["node", "signal", "series"],
        )
        gpu = GaugeMetricFamily(
            SUMMARY_PREFIX + "gpu_score",
            "GPU fused score in [0, 1], as this agent scored it.",
            labels=["node", "gpu"],
        )
        tick, pipeline = self._tick, self._pipeline
        if tick is not None and pipeline is not None:
            values = pipeline.values
            for col, node, name, series in self._node_columns(pipeline):
                value = float(values[col]) if col < values.shape[0] else math.nan
                if math.isfinite(value):
                    signal.add_metric([node, name, series], value)
            scores = tick.scores
            for i in np.flatnonzero(~np.isnan(scores.gpu_score)).tolist():
                node = scores.node_names[int(scores.gpu_node[i])]
                gpu.add_metric([node, scores.gpu_label[i]], float(scores.gpu_score[i]))
        yield from (signal, gpu)
        xid = GaugeMetricFamily(
            SUMMARY_PREFIX + "xid",
            "The last XID code seen on the GPU, 0 for none yet (sticky: a change is a new XID).",
            labels=["node", "gpu", "err_msg"],
        )
        gpus = dict.fromkeys(self._gpus(), 0.0)
        messages = {}
        for key, event in self._xids.items():
            gpus[key], messages[key] = float(event.xid), event.message
        for key, code in sorted(gpus.items()):
            xid.add_metric([*key, messages.get(key, "")], code)
        yield xid

    def _gpus(self) -> list[tuple[str, str]]:
        """(node, gpu) of every GPU of the latest tick."""
        if self._tick is None:
            return []
        scores = self._tick.scores
        return [
            (scores.node_names[int(node)], label)
            for node, label in zip(scores.gpu_node.tolist(), scores.gpu_label, strict=True)
        ]
