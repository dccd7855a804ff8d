"""HTML replay report: structure, self-containment, chart content, and a real browser render."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import struct
import subprocess
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from e2e.procs import require_tool

from detector.cli.main import main
from detector.evaluation.matching import Evaluation, evaluate
from detector.model import Alert, FloatArray, XidEvent
from detector.replay.report.html import render_html
from detector.replay.report.svg import encode_png, pool_max
from detector.sim import Scenario, SimulatedCluster

T0 = 1_735_689_600.0  # 2025-01-01 00:00 UTC
DAY = 86400.0


class Page(HTMLParser):
    """Every start tag with its attributes, the enclosing section of each, and its text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str], str]] = []  # (tag, attrs, section id)
        self.text: dict[str, list[str]] = {}
        self.rows: dict[str, list[list[str]]] = {}  # section id -> body rows' cell texts
        self._section = ""
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "section":
            self._section = a.get("id", "")
        elif tag == "tr":
            self.rows.setdefault(self._section, []).append([])
        elif tag == "td":
            self._cell = []
        self.tags.append((tag, a, self._section))

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[self._section][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.setdefault(self._section, []).append(data)
        if self._cell is not None:
            self._cell.append(data)

    def find(
        self, tag: str, cls: str | None = None, section: str | None = None
    ) -> list[dict[str, str]]:
        return [
            a
            for t, a, s in self.tags
            if t == tag
            and (cls is None or cls in a.get("class", "").split())
            and (section is None or s == section)
        ]

    def section_text(self, section: str) -> str:
        return "".join(self.text.get(section, []))


def decode_png(data: bytes) -> np.ndarray:
    """(height, width, channels) pixels of an 8-bit non-interlaced grey/RGB/RGBA PNG."""
    assert b"\x89PNG\r\n\x1a\n" == data[:8]
    pos, idat, header = 8, bytearray(), b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert (8, 0) == (depth, interlace)
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    stride = width * bpp
    raw = zlib.decompress(bytes(idat))
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int64)
        if kind == 1:  # Sub: a running sum along the row, per channel
            line = np.cumsum(line.reshape(width, bpp), axis=0).reshape(stride)
        elif kind == 2:  # Up
            line = line + prev
        elif kind in (3, 4):  # Average, Paeth: sequential in x
            cur, up = line.tolist(), prev.tolist()
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                b = up[i]
                if kind == 3:
                    cur[i] = (cur[i] + ((a + b) >> 1)) & 255
                    continue
                c = up[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            line = np.asarray(cur, dtype=np.int64)
        prev = line & 255
        out[y] = prev
    return out.reshape(height, width, bpp)


@dataclass
class FakeReplay:
    """A replay result built by hand (the report reads it through its ReplayData protocol)."""

    alerts: list[Alert]
    failures: list[XidEvent]
    node_scores: FloatArray
    node_names: tuple[str, ...]
    start: float = T0
    step: float = 30.0
    all_xids: list[XidEvent] = field(default_factory=list)
    incidents: int = 0
    series: int = 100
    wall_s: float = 1.0
    signals_found: tuple[str, ...] = ()
    signals_missing: tuple[str, ...] = ()
    split_nodes: tuple[str, ...] = ()
    inferred_split_nodes: tuple[str, ...] = ()
    alone_nodes: tuple[str, ...] = ()
    cohort_advice: str = ""
    times: FloatArray = field(init=False)
    end: float = field(init=False)
    ticks: int = field(init=False)
    evaluation: Evaluation = field(init=False)

    def __post_init__(self) -> None:
        self.ticks = self.node_scores.shape[0]
        self.times = self.start + self.step * np.arange(self.ticks, dtype=np.float64)
        self.end = float(self.times[-1])
        self.all_xids = self.all_xids or list(self.failures)
        self.evaluation = evaluate(self.alerts, self.failures, start=self.start, end=self.end)


def quiet_cluster(days: float, nodes: int) -> np.ndarray:
    ticks = int(days * DAY / 30)
    return np.full((ticks, nodes), 0.05)


@pytest.fixture(scope="module")
def small_replay(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object], Path]:
    """The built-in simulated cluster, 6 nodes for 0.1 days, with --html and --report-json."""
    out = tmp_path_factory.mktemp("report")
    html, report = out / "report.html", out / "report.json"
    code = main(
        ["replay", "--days", "0.1", "--nodes", "6", "--quiet", "--html", str(html),
         "--report-json", str(report)]
    )  # fmt: skip
    assert 0 == code
    return html.read_text("utf-8"), json.loads(report.read_text()), html


def test_replay_html_has_every_section(small_replay: tuple[str, dict[str, object], Path]) -> None:
    """--html writes the summary, failures, timelines, heat map, signal, FP/day, offender,
    diagnosis and recovery parts."""
    text, _, _ = small_replay
    page = Page(text)
    sections = [a["id"] for a in page.find("section")]
    expected = ["summary", "failures", "timelines", "heatmap", "signals", "fp", "offenders"]
    assert [*expected, "diagnosis", "recovery"] == sections
    assert 1 == len(page.find("table", "alerts", "diagnosis"))
    assert 1 == len(page.find("table", "summary", "summary"))
    assert 1 == len(page.find("svg", "heat", "heatmap"))
    assert 1 == len(page.find("svg", "bars", "fp"))
    for section in ("failures", "signals", "offenders"):
        assert 1 == len(page.find("table", section, section)), section


def test_one_timeline_per_failed_node(small_replay: tuple[str, dict[str, object], Path]) -> None:
    """Every node with a failure XID gets exactly one timeline SVG, anchored by node name."""
    text, report, _ = small_replay
    failures = report["failures"]
    assert isinstance(failures, list)
    assert failures, "the demo slice should contain failures"
    nodes = sorted({f["node"] for f in failures})
    page = Page(text)
    assert len(nodes) == len(page.find("svg", "timeline", "timelines"))
    assert [f"node-{n}" for n in nodes] == sorted(
        a["id"] for a in page.find("div", "node", "timelines")
    )


def test_summary_table_matches_report_json(
    small_replay: tuple[str, dict[str, object], Path],
) -> None:
    """The HTML summary shows the same failures, alerts and FP/day as the report JSON."""
    text, report, _ = small_replay
    summary = report["summary"]
    assert isinstance(summary, dict)
    (row,) = [r for r in Page(text).rows["summary"] if r]
    assert str(summary["failures"]) == row[0]
    assert str(len(report["alerts"])) == row[3]  # type: ignore[arg-type]
    assert f"{summary['fp_per_day']:.2f}" == row[6]


def test_summary_says_where_failures_came_from_and_which_signals_were_fed(
    small_replay: tuple[str, dict[str, object], Path],
) -> None:
    """Under the summary: the failures counted by the source that first reported them (here
    the simulator's ground truth) and the named signals the data fed, with those it did not."""
    text, report, _ = small_replay
    failures = report["failures"]
    assert isinstance(failures, list)
    notes = [a.get("id") for a in Page(text).find("p", "note", "summary")]
    assert "inputs" == notes[-1]
    match = re.search(r"first reported each: simulator (\d+)\.", text)
    assert match is not None
    assert int(match[1]) == len(failures)
    fed = re.search(r"the data fed: (\d+) of (\d+); the others are listed below\.", text)
    assert fed is not None
    assert 0 < int(fed[1]) < int(fed[2])
    unfed = re.search(r"<summary>(\d+) signal\(s\) named in rules/signals.yaml not fed", text)
    assert unfed is not None
    assert int(fed[2]) - int(fed[1]) == int(unfed[1])


def test_inputs_name_the_nodes_whose_gpus_ran_different_jobs() -> None:
    """A node split between jobs (GPU peers by workload) is named under the summary, linked
    to its row; a replay without any names none."""
    scores = quiet_cluster(1, 2)
    split = FakeReplay([], [], scores, ("n0", "n1"), split_nodes=("n1",))
    text = render_html(split, threshold=0.6, label="x")
    assert len([a for _, a, _ in Page(text).tags if a.get("id") == "inputs"]) == 1
    assert re.search(r"different jobs at once on 1 node\(s\).*href='#node-n1'", text)
    inferred = FakeReplay([], [], scores, ("n0", "n1"), inferred_split_nodes=("n0",))
    text = render_html(inferred, threshold=0.6, label="x")
    assert re.search(r"moved as separate jobs on 1 node\(s\).*href='#node-n0'", text)
    assert "different jobs" not in text
    alone = FakeReplay([], [], scores, ("n0", "n1"), alone_nodes=("n1",))
    text = render_html(alone, threshold=0.6, label="x")
    assert re.search(r"without GPU peers.*href='#node-n1'", text)
    assert "separate jobs" not in text
    plain = render_html(FakeReplay([], [], scores, ("n0", "n1")), threshold=0.6, label="x")
    assert "different jobs" not in plain
    assert "separate jobs" not in plain
    assert "without GPU peers" not in plain
    assert "cohort" not in plain
    advice = "node cohorts: the GPUs ran up to 3 jobs at once (pod), yet <all> nodes"
    advised = FakeReplay([], [], scores, ("n0", "n1"), cohort_advice=advice)
    assert "Node cohorts: the GPUs ran up to 3 jobs at once (pod), yet &lt;all&gt; nodes." in (
        render_html(advised, threshold=0.6, label="x")
    )


def test_report_is_self_contained(small_replay: tuple[str, dict[str, object], Path]) -> None:
    """No network resource: every src/href is a fragment or a data: URI, no script or link."""
    text, _, _ = small_replay
    page = Page(text)
    refs = [a[k] for _, a, _ in page.tags for k in ("src", "href") if k in a]
    assert refs, "the heat map image and node links should be there"
    assert [] == [r for r in refs if not r.startswith(("#", "data:"))]
    assert [] == page.find("script") + page.find("link") + page.find("iframe")
    assert re.search(r"https?://", text) is None


def test_heat_map_pixels_follow_scores() -> None:
    """The heat map PNG has a row per node; a one-tick spike survives max-pooling as dark red."""
    scores = quiet_cluster(3, 4)  # 8640 ticks, pooled to 1000 columns
    scores[4321, 2] = 1.0
    scores[:100, 3] = np.nan
    text = render_html(
        FakeReplay([], [], scores, ("a", "b", "c", "d")), threshold=0.6, label="fake"
    )
    (image,) = Page(text).find("image", section="heatmap")
    pixels = decode_png(base64.b64decode(image["href"].split(",", 1)[1]))
    assert (4, 1000, 3) == pixels.shape
    hot = np.argwhere(np.all(pixels == (128, 0, 38), axis=2))
    assert [[2, 4321 * 1000 // 8640]] == hot.tolist()
    assert (200, 204, 212) == tuple(pixels[3, 0])  # no data
    assert (255, 255, 255) != tuple(pixels[0, 0])  # 0.05 is tinted, not blank


def test_timeline_shows_lead_and_misses_under_a_running_alert() -> None:
    """A zoom panel brackets the 20 min lead and labels XIDs 2 s apart once; a failure past the
    horizon under the same, still firing alert is explained as such."""
    scores = quiet_cluster(1, 2)
    fail1 = T0 + 6 * 3600  # 06:00
    fail2 = fail1 + 5400  # 07:30, 110 min after the alert started: outside the 60 min horizon
    alert = Alert("n1", "3", fail1 - 1200, fail2 + 600, 0.9, ("ecc_sbe_volatile",))
    failures = [
        XidEvent(fail1, "n1", "3", 48),
        XidEvent(fail1 + 2, "n1", "3", 95),
        XidEvent(fail2, "n1", "3", 79),
    ]
    text = render_html(
        FakeReplay([alert], failures, scores, ("n0", "n1")), threshold=0.6, label="fake"
    )
    page = Page(text)
    assert 1 == len(page.find("svg", "timeline"))
    timeline = page.section_text("timelines")
    assert "lead 20 min" in timeline
    assert "XID 48, XID 95" in timeline
    assert "no new alert (the alert raised at 05:40 was still firing)" in timeline
    missed = page.rows["failures"][-1]
    assert ["missed", "(the alert of 05:40 still firing)"] == [missed[4], missed[6]]


def blemish_replay() -> FakeReplay:
    """A report with what issue 39 saw go wrong: a matched alert under a zoom window, a
    failure 30 min after the data starts (its window would begin before the data), cluster
    incidents, and 38 named signals the data did not feed."""
    scores = quiet_cluster(1, 2)
    fail = T0 + 1800.0
    scores[int((fail - 1200 - T0) // 30) : int((fail + 6 * 3600 - T0) // 30), 1] = 0.9
    alert = Alert("n1", "3", fail - 1200, fail + 6 * 3600, 0.9, ("pcie_replay",))
    unfed = tuple(f"signal_{i:02d}" for i in range(38))
    return FakeReplay(
        [alert],
        [XidEvent(fail, "n1", "3", 79)],
        scores,
        ("n0", "n1"),
        incidents=3,
        signals_found=("gpu_temp", "pcie_replay"),
        signals_missing=unfed,
    )


def test_a_matched_alert_band_is_drawn_over_the_zoom_window_shade() -> None:
    """In the overview the zoom window's shade lies under the alert bands and only its outline
    over them, so a matched band keeps its colour where a window covers it."""
    text = render_html(blemish_replay(), threshold=0.6, label="x")
    (timeline,) = re.findall(r"<svg class=\"timeline\".*?</svg>", text)
    classes = re.findall(r'<rect [^>]*class="(\w+)"', timeline)
    overview = classes[: classes.index("winedge") + 1]
    assert ["win", "tp", "winedge"] == [c for c in overview if c in ("win", "tp", "fp", "winedge")]
    assert ".winedge{fill:none;" in text


def test_a_zoom_window_starts_no_earlier_than_the_data() -> None:
    """A failure 30 min into the data: its 90 min zoom window is clamped to the first tick."""
    replay = blemish_replay()
    text = render_html(replay, threshold=0.6, label="x")
    page = Page(text)
    (window,) = page.find("rect", "win", "timelines")
    assert "44.0" == window["x"]  # the overview's left edge: the data's start
    assert "A 2025-01-01 00:00 – 01:15 UTC" in page.section_text("timelines")


def test_cluster_incidents_are_explained_beside_the_figure() -> None:
    """The summary's 'cluster incidents' links to a one-line note saying what one is."""
    text = render_html(blemish_replay(), threshold=0.6, label="x")
    page = Page(text)
    (row,) = [r for r in page.rows["summary"] if r]
    assert "3" == row[8]
    assert [{"href": "#incidents"}] == page.find("a", section="summary")[:1]
    notes = [a.get("id") for a in page.find("p", "note", "summary")]
    assert "incidents" == notes[0]  # the first note under the table
    explained = re.search(r"<p class=note id=incidents>(.*?)</p>", text)
    assert explained is not None
    assert explained[1].startswith("Cluster incidents: how many times many nodes moved together")


def test_signals_not_fed_come_last_in_the_summary_and_collapsed() -> None:
    """The 38 names sit in a closed <details> after the summary's table and notes."""
    text = render_html(blemish_replay(), threshold=0.6, label="x")
    page = Page(text)
    summary = [(t, a.get("id")) for t, a, s in page.tags if s == "summary"]
    assert ("details", "unfed") == [(t, i) for t, i in summary if t in ("table", "details")][-1]
    (details,) = page.find("details", section="summary")
    assert "open" not in details
    assert "38 signal(s) named in rules/signals.yaml not fed by the data" in text
    names = re.search(r"<details class=note id=unfed>.*?</details>", text, flags=re.S)
    assert names is not None
    assert 38 == names[0].count("<code>signal_")
    assert "the data fed: 2 of 40; the others are listed below." in text


def test_fp_per_day_counts_unmatched_alerts_by_day() -> None:
    """FP/day bars count the alerts that matched no failure in the day they started."""
    scores = quiet_cluster(3, 2)
    fps = [Alert("n0", None, T0 + h * 3600, T0 + h * 3600 + 60, 0.7, ()) for h in (1, 5, 50)]
    failure = XidEvent(T0 + 30 * 3600, "n1", None, 79)
    hit = Alert("n1", None, failure.time - 600, failure.time + 60, 0.9, ("gpu_util",))
    text = render_html(
        FakeReplay([*fps, hit], [failure], scores, ("n0", "n1")), threshold=0.6, label="x"
    )
    bars = re.findall(r'class="bar"><title>(\d+) FP</title>', text)
    assert ["2", "0", "1"] == bars
    assert 1 == len(Page(text).find("svg", "bars", "fp"))


def test_offenders_rank_nodes_by_alerts_and_failures() -> None:
    """Repeat offenders: most alerts + failures first, false positives counted per node."""
    scores = quiet_cluster(1, 3)
    failure = XidEvent(T0 + 7200, "n2", "0", 79)
    alerts = [Alert("n1", None, T0 + h * 3600, T0 + h * 3600 + 60, 0.7, ("nfs",)) for h in (3, 6)]
    alerts.append(Alert("n2", "0", failure.time - 300, failure.time, 0.9, ("xid_79",)))
    text = render_html(
        FakeReplay(alerts, [failure], scores, ("n0", "n1", "n2")), threshold=0.6, label="x"
    )
    rows = [r for r in Page(text).rows["offenders"] if r]  # the header row has no <td>
    assert [
        ["1", "n1", "2", "2", "0", "–", "nfs"],
        ["2", "n2", "1", "0", "1", "79", "xid_79"],
    ] == rows


def test_pool_max_keeps_spikes_and_tells_gaps_from_empty_bins() -> None:
    """Max-pooling keeps a one-tick spike; NaN ticks make a gap, bins without ticks are flagged."""
    times = np.arange(10_000, dtype=np.float64)
    values = np.zeros(10_000)
    values[1234] = 5.0
    values[5000:5100] = np.nan
    centers, pooled, filled = pool_max(times, values, 0.0, 9999.0, 100)
    assert 5.0 == np.nanmax(pooled)
    assert [12] == np.flatnonzero(pooled[:, 0] == 5.0).tolist()
    assert [50] == np.flatnonzero(np.isnan(pooled[:, 0])).tolist()
    assert filled.all()
    _, sparse, filled = pool_max(times[:10], values[:10], 0.0, 9.0, 40)
    assert 10 == int(filled.sum())
    assert 10 == int(np.isfinite(sparse).sum())
    assert 100 == centers.shape[0]


def test_png_encoder_round_trips() -> None:
    """encode_png writes pixels that a PNG decoder reads back exactly."""
    rgb = np.random.default_rng(3).integers(0, 256, (7, 13, 3), dtype=np.uint8)
    assert rgb.tolist() == decode_png(encode_png(rgb)).tolist()


@pytest.mark.tools
def test_report_renders_in_headless_chromium(
    small_replay: tuple[str, dict[str, object], Path], tmp_path: Path
) -> None:
    """Chromium renders the report to a non-blank 1400x2000 screenshot with red XID marks."""
    chromium = require_tool("chromium", "chromium-browser")
    _, _, html = small_replay
    png = tmp_path / "shot.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}",
         "--window-size=1400,2000", html.as_uri()],
        capture_output=True, timeout=180, check=True,
    )  # fmt: skip
    pixels = decode_png(png.read_bytes())[:, :, :3].astype(np.int64)
    assert (2000, 1400) == pixels.shape[:2]
    assert pixels.std() > 20  # a blank page has none
    red = (pixels[:, :, 0] > 200) & (pixels[:, :, 1] < 80) & (pixels[:, :, 2] < 80)
    assert red.sum() > 50  # failure XID lines and labels were drawn


def chromium_screenshot(html: str, tmp_path: Path, width: int, height: int) -> np.ndarray:
    """Headless Chromium's screenshot of ``html`` as (height, width, 3) RGB pixels."""
    chromium = require_tool("chromium", "chromium-browser")
    page, png = tmp_path / "page.html", tmp_path / "shot.png"
    page.write_text(html, "utf-8")
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--force-device-scale-factor=1", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={png}", f"--window-size={width},{height}", page.as_uri()],
        capture_output=True, timeout=180, check=True,
    )  # fmt: skip
    return decode_png(png.read_bytes())[:, :, :3].astype(np.int64)


@pytest.mark.tools
def test_a_matched_band_stays_amber_under_a_zoom_window_in_chromium(tmp_path: Path) -> None:
    """Rendered by Chromium, the overview's matched alert band is amber inside the zoom window
    as outside it (the window's shade used to cover it and turn it false-positive grey)."""
    replay = blemish_replay()
    text = render_html(replay, threshold=0.6, label="x")
    (timeline,) = re.findall(r"<svg class=\"timeline\".*?</svg>", text)
    css = re.search(r"<style>(.*?)</style>", text, flags=re.S)
    assert css is not None
    page = f"<!DOCTYPE html><style>{css[1]}body{{margin:0}}</style><body>{timeline}</body>"
    pixels = chromium_screenshot(page, tmp_path, 1200, 260)

    def x(t: float) -> int:  # the overview's axes: left 44, width 1200 - 44 - 16
        return round(44 + (t - replay.start) / (replay.end - replay.start) * 1140)

    y = 14 + 45  # low in the overview's plot, under the score line
    inside = pixels[y, x(T0 + 3000)]  # in window A (00:00-01:15) and in the alert band
    outside = pixels[y, x(T0 + 3 * 3600)]  # in the band, past the window
    assert inside[0] - inside[2] > 50, inside.tolist()  # amber: red well above blue
    assert np.abs(inside - outside).max() < 30, (inside.tolist(), outside.tolist())


def test_quiet_replay_without_scores_still_renders_every_section() -> None:
    """No failures, no alerts and no recorded scores: every section says so instead of failing."""

    @dataclass
    class Unrecorded(FakeReplay):
        def __post_init__(self) -> None:
            super().__post_init__()
            self.node_scores = np.zeros((0, 0))
            self.times = np.zeros(0)

    text = render_html(
        Unrecorded([], [], quiet_cluster(0.5, 3), ("a", "b", "c")), threshold=0.6, label="q"
    )
    page = Page(text)
    assert 7 == len(page.find("section"))
    assert "No failure XIDs" in page.section_text("failures")
    assert "No node had a failure" in page.section_text("timelines")
    assert "Scores were not recorded" in page.section_text("heatmap")
    assert "No alerts and no failures" in page.section_text("offenders")
    assert ["0"] * 12 == re.findall(r'class="bar"><title>(\d+) FP</title>', text)


def test_built_in_replay_reports_recovery_from_its_simulated_jobs(
    small_replay: tuple[str, dict[str, object], Path],
) -> None:
    """With no DUMP the report JSON's ``recovery`` analyses the simulated cluster's own job
    attempts, and the HTML report has the recovery section with its tables."""
    text, report, _ = small_replay
    recovery = report["recovery"]
    assert isinstance(recovery, dict)
    scenario = dataclasses.replace(Scenario.demo(), days=0.1, nodes=6)
    attempts = SimulatedCluster(scenario).job_attempts()
    assert len(attempts) == recovery["retry_chains"]["attempts"]
    assert {"failures", "alerts"} <= set(recovery["concentration"])
    page = Page(text)
    for table in ("concentration", "chains", "retry-timing"):
        assert 1 == len(page.find("table", table, "recovery")), table
