"""A fleet fed by agents' summaries finds what a fleet scraping the raw pages finds.

Six simulated nodes run one job (one cohort); one node's host leaks memory. Per node an agent
(a ``Daemon`` in agent mode whose localhost leads to its node's simulated exporters, over real
HTTP) scores its GPUs against each other and serves its summary (GET /summary). One fleet
scrapes the six summaries, another the twelve raw exporter pages. All run on one virtual
clock, one tick each per simulated step, in order: the agents, then both fleets. The fleets
must alert on the leaking node, the same one, and on nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from node_localhost import NodeLocalhost

from detector.config import Config, load_config
from detector.loop import LoopTick
from detector.service import Daemon
from detector.sim import HostFault, JobSpec, Scenario, serve

STEP = 30.0  # simulated seconds per tick
TICKS = 110
FAULT_AT = 1800.0  # after a 60-tick healthy stretch
SCENARIO = Scenario(
    nodes=6,
    gpus=2,
    days=TICKS * STEP / 86400.0 + 0.01,
    fault_trace=None,
    failures=(),
    noisy_nodes=0,
    seed=11,
    jobs=(JobSpec("train", tuple(range(6))),),
    host_faults=(HostFault("memory", node=2, at_s=FAULT_AT),),
)
LEAKING = SCENARIO.node_name(2)
AGENT_PORT = 9108


class VirtualClock:
    """Simulated time, moved by the test after each round of ticks."""

    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


def _agents_transport(agents: dict[str, Daemon]) -> httpx.MockTransport:
    """The agents' GET /summary by host name (each agent's own ``Summary.render``)."""

    def handler(request: httpx.Request) -> httpx.Response:
        assert "/summary" == request.url.path
        body, content_type = agents[request.url.host].summary.render(request.headers.get("accept"))
        return httpx.Response(200, content=body, headers={"content-type": content_type})

    return httpx.MockTransport(handler)


def _config(tmp_path: Path, name: str, doc: dict[str, Any]) -> Config:
    common = {
        "scrape": {"interval_s": STEP, "timeout_s": 5.0, "jitter_fraction": 0.0},
        "kmsg": {"enabled": False},
        "logging": {"level": "warning"},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**common, **doc}))
    return load_config(path, env={})


def _alerts(ticks: list[LoopTick]) -> list[tuple[str, float]]:
    return [(a.node, a.start) for t in ticks for a in t.started]


@pytest.mark.slow
async def test_a_fleet_fed_by_agent_summaries_alerts_on_the_node_raw_pages_alert_on(
    tmp_path: Path,
) -> None:
    """The leaking node alerts in both fleets, after the leak began, within two ticks of each
    other; no other node alerts in either."""
    clock = VirtualClock(SCENARIO.start)
    exporters = serve(SCENARIO, port=0, per_node_ports=True, clock=clock)
    agents = {
        node: Daemon(
            _config(tmp_path, node, {"mode": "agent", "node_name": node}),
            clock=clock,
            client=httpx.AsyncClient(transport=NodeLocalhost(dcgm, node_exp)),
        )
        for node, (dcgm, node_exp) in exporters.urls.items()
    }
    summaries = Daemon(
        _config(
            tmp_path,
            "summaries",
            {
                "targets": {
                    "static": [
                        {"url": f"http://{node}:{AGENT_PORT}/summary", "node": node}
                        for node in agents
                    ]
                }
            },
        ),
        clock=clock,
        client=httpx.AsyncClient(transport=_agents_transport(agents)),
    )
    raw = Daemon(
        _config(
            tmp_path,
            "raw",
            {
                "targets": {
                    "static": [
                        {"url": url, "node": node}
                        for node, urls in exporters.urls.items()
                        for url in urls
                    ]
                }
            },
        ),
        clock=clock,
    )
    by_summary: list[LoopTick] = []
    by_page: list[LoopTick] = []
    try:
        for _ in range(TICKS):
            for agent in agents.values():
                await agent.tick()
            by_summary.append(await summaries.tick())
            by_page.append(await raw.tick())
            clock.t += STEP
    finally:
        for daemon in (*agents.values(), summaries, raw):
            await daemon.aclose()
        exporters.close()

    fault = SCENARIO.start + FAULT_AT
    summary_alerts, page_alerts = _alerts(by_summary), _alerts(by_page)
    assert [LEAKING] == sorted({node for node, _ in page_alerts})
    assert [LEAKING] == sorted({node for node, _ in summary_alerts})
    first_page, first_summary = page_alerts[0][1], summary_alerts[0][1]
    assert first_page >= fault
    assert first_summary >= fault
    assert abs(first_summary - first_page) <= 2 * STEP
    # the fleet saw every node through its agent, GPUs included (their agents' scores)
    last = by_summary[-1].scores
    assert sorted(agents) == sorted(last.node_names)
    assert 6 * SCENARIO.gpus == int(np.isfinite(last.gpu_score).sum())
