"""Dump formats: detection, reading in time order, the npcache, bad input, the writer, promtool."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from e2e.procs import promtool_backfill, require_tool
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from detector.errors import DumpError
from detector.ingest.dumps.read import (
    DumpStats,
    OpenMetricsWriter,
    detect_format,
    read_dump,
    write_openmetrics,
)
from detector.ingest.dumps.store import Run, merge_runs
from detector.ingest.parse import parse_exposition
from detector.model import Sample, SampleBatch
from detector.series.index import SeriesIndex

FIXTURES = Path(__file__).parent / "fixtures" / "dumps"
T0 = 1_700_000_000.0
GPU0 = (("Hostname", "node-a"), ("UUID", "GPU-0a"), ("gpu", "0"))
GPU1 = (("Hostname", "node-a"), ("UUID", "GPU-1a"), ("gpu", "1"))
LOAD = (("instance", "node-a:9100"), ("job", "node"), ("note", 'say "hi"\nbye'))
# The 8 samples every fixture format holds (the dcgm blank sentinel already NaN).
FIXTURE_SAMPLES = [
    Sample("DCGM_FI_DEV_GPU_TEMP", GPU0, 41.0, T0),
    Sample("DCGM_FI_DEV_GPU_TEMP", GPU0, 42.0, T0 + 15),
    Sample("DCGM_FI_DEV_GPU_TEMP", GPU0, 43.5, T0 + 30),
    Sample("DCGM_FI_DEV_GPU_TEMP", GPU1, 50.0, T0),
    Sample("DCGM_FI_DEV_GPU_TEMP", GPU1, float("nan"), T0 + 15),
    Sample("DCGM_FI_DEV_GPU_TEMP", GPU1, 52.0, T0 + 30),
    Sample("node_load1", LOAD, 0.5, T0 + 7.5),
    Sample("node_load1", LOAD, float("nan"), T0 + 22.5),
]

Rows = list[tuple[float, str, float]]


def rows_of(samples: list[Sample], index: SeriesIndex) -> Rows:
    """(time, series identity, value) of samples, stably sorted by time, as read_dump gives."""
    rows = [
        (s.timestamp or 0.0, _identity(index, index.add(s.name, s.labels)), s.value)
        for s in samples
    ]
    return sorted(rows, key=lambda row: row[0])


def _identity(index: SeriesIndex, column: int) -> str:
    info = index.infos[column]
    return f"{info.metric}{dict(info.labels)}"


def read_rows(paths: Path | list[Path], index: SeriesIndex | None = None, **kw: object) -> Rows:
    """Everything read_dump yields, flattened, checking each batch is time-sorted."""
    index = SeriesIndex() if index is None else index
    rows: Rows = []
    last = -np.inf
    for batch in read_dump(paths, index, **kw):  # type: ignore[arg-type]
        assert (np.diff(batch.times) >= 0).all()
        assert len(batch) == 0 or batch.times[0] >= last
        last = batch.times[-1] if len(batch) else last
        rows += [
            (t, _identity(index, c), v)
            for t, c, v in zip(
                batch.times.tolist(), batch.columns.tolist(), batch.values.tolist(), strict=True
            )
        ]
    return rows


def same_rows(expected: Rows, actual: Rows) -> bool:
    """Equal including NaN values, in order up to the order of equal times."""
    key = lambda row: (row[0], row[1])  # noqa: E731
    expected, actual = sorted(expected, key=key), sorted(actual, key=key)
    if [r[:2] for r in expected] != [r[:2] for r in actual]:
        return False
    return bool(np.array_equal([r[2] for r in expected], [r[2] for r in actual], equal_nan=True))


def identical(expected: Rows, actual: Rows) -> bool:
    """Equal in exactly this order, NaN equal to NaN."""
    same_keys = [r[:2] for r in expected] == [r[:2] for r in actual]
    values = ([r[2] for r in expected], [r[2] for r in actual])
    return same_keys and bool(np.array_equal(*values, equal_nan=True))


def shuffled_samples(count: int, seed: int = 7) -> list[Sample]:
    rng = np.random.default_rng(seed)
    samples = []
    for step in range(count):
        for gpu in range(3):
            labels = (("Hostname", f"node-{gpu % 2}"), ("gpu", str(gpu)))
            samples.append(
                Sample(
                    "DCGM_FI_DEV_POWER_USAGE", labels, float(rng.normal(300, 20)), T0 + 15 * step
                )
            )
        samples.append(
            Sample(
                "node_network_receive_bytes_total",
                (("device", "ib0"), ("instance", "node-0:9100")),
                float(step * 1000),
                T0 + 15 * step + 0.25,
            )
        )
    samples.append(Sample("weird", (("v", 'a\\b"c\nd'),), float("nan"), T0 + 1.5))
    order = rng.permutation(len(samples))
    return [samples[i] for i in order]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("promtool_backfill.om", "openmetrics"),
        ("promtool_tsdb_dump.txt", "tsdb-dump"),
        ("json_matrix/01_gpu_temp.json", "prometheus-json"),
        ("instant_vector.json", "prometheus-json"),
    ],
)
def test_detect_format_sniffs_content_also_gzipped(
    name: str, expected: str, tmp_path: Path
) -> None:
    """Each fixture is recognised by content, also when gzipped under a misleading name."""
    data = (FIXTURES / name).read_bytes()
    disguised = tmp_path / "dump.bin"
    disguised.write_bytes(gzip.compress(data))
    assert expected == detect_format(FIXTURES / name)
    assert expected == detect_format(disguised)


def test_unknown_format_raises_naming_the_file(tmp_path: Path) -> None:
    """A CSV is no dump: DumpError names the file."""
    path = tmp_path / "scores.csv"
    path.write_text("time,node,gpu,score\n1,a,0,0.5\n")
    with pytest.raises(DumpError, match=r"scores\.csv: not a known dump format"):
        detect_format(path)
    with pytest.raises(DumpError, match=r"scores\.csv"):
        read_rows(path, cache=False)


@pytest.mark.parametrize(
    "fixture", ["promtool_backfill.om", "promtool_tsdb_dump.txt", "json_matrix"]
)
def test_every_format_reads_the_same_samples_in_time_order(fixture: str) -> None:
    """OpenMetrics, tsdb dump (ms) and JSON matrix (two files) give the same time-sorted rows."""
    index = SeriesIndex()
    expected = rows_of(FIXTURE_SAMPLES, index)
    actual = read_rows(FIXTURES / fixture, index, cache=False)
    assert same_rows(expected, actual)
    assert [r[0] for r in actual] == sorted(r[0] for r in expected)


def test_json_matrix_from_several_paths_merges_files() -> None:
    """Several JSON files given one by one merge into one time order."""
    files = sorted((FIXTURES / "json_matrix").iterdir())
    index = SeriesIndex()
    assert same_rows(rows_of(FIXTURE_SAMPLES, index), read_rows(files, index, cache=False))


def test_json_vector_reads_single_values() -> None:
    """An instant query (resultType vector) gives one sample per series at its time."""
    index = SeriesIndex()
    expected = rows_of(
        [
            Sample("up", (("instance", "node-a:9400"), ("job", "dcgm")), 1.0, T0 + 100.25),
            Sample("up", (("instance", "node-b:9400"), ("job", "dcgm")), 0.0, T0 + 100.25),
        ],
        index,
    )
    assert same_rows(expected, read_rows(FIXTURES / "instant_vector.json", index, cache=False))


def test_openmetrics_round_trip_plain_and_gzip(tmp_path: Path) -> None:
    """Shuffled samples written as OpenMetrics (plain and .gz) read back identical, time-sorted."""
    samples = shuffled_samples(40)
    types = {"DCGM_FI_DEV_POWER_USAGE": "gauge", "node_network_receive_bytes": "counter"}
    write_openmetrics(tmp_path / "d.om", samples, types)
    write_openmetrics(tmp_path / "d.om.gz", samples, types)
    index = SeriesIndex()
    expected = rows_of(samples, index)
    assert same_rows(expected, read_rows(tmp_path / "d.om", index, cache=False))
    assert same_rows(expected, read_rows(tmp_path / "d.om.gz", index, cache=False))
    assert gzip.decompress((tmp_path / "d.om.gz").read_bytes()) == (tmp_path / "d.om").read_bytes()


def test_a_dump_that_cannot_be_written_is_named_and_leaves_no_temp_file(tmp_path: Path) -> None:
    """Writing over a directory fails as DumpError naming the dump the caller gave, not the
    temp file the writer wrote first, and that temp file is gone."""
    target = tmp_path / "d.om"
    target.mkdir()
    with pytest.raises(DumpError, match=r"d\.om: cannot write the dump: ") as caught:
        write_openmetrics(target, shuffled_samples(5))
    assert ".tmp-" not in str(caught.value)
    assert [target] == list(tmp_path.iterdir())


def test_small_chunks_merge_to_the_same_order(tmp_path: Path) -> None:
    """Many tiny sorted runs (chunk_samples=7), cached or not, give the one-run result."""
    samples = shuffled_samples(60)
    write_openmetrics(tmp_path / "d.om", samples)
    whole = read_rows(tmp_path / "d.om", cache=False)
    assert identical(whole, read_rows(tmp_path / "d.om", cache=False, chunk_samples=7))
    assert identical(whole, read_rows(tmp_path / "d.om", chunk_samples=7))
    batches = list(read_dump(tmp_path / "d.om", SeriesIndex(), chunk_samples=7))
    assert max(len(b) for b in batches) <= 7


def test_series_ordered_text_is_resorted_by_time(tmp_path: Path) -> None:
    """A promtool-style file (each series one block) comes out in global time order."""
    rows = read_rows(FIXTURES / "promtool_backfill.om", cache=False)
    times = [r[0] for r in rows]
    assert [T0, T0, T0 + 7.5, T0 + 15, T0 + 15, T0 + 22.5, T0 + 30, T0 + 30] == times


def test_concatenated_scrapes_with_and_without_eof_and_ms(tmp_path: Path) -> None:
    """Pages one after another (with/without # EOF, Prometheus-text ms timestamps) all read."""
    path = tmp_path / "scrapes.prom"
    path.write_text(
        '# TYPE up gauge\nup{instance="a"} 1 1700000030000\n'
        '# TYPE up gauge\nup{instance="a"} 0 1700000015000\n# EOF\n'
        '# TYPE up gauge\nup{instance="a"} 1 1700000000.5\n# EOF\n'
    )
    rows = read_rows(path, cache=False)
    assert [(T0 + 0.5, 1.0), (T0 + 15, 0.0), (T0 + 30, 1.0)] == [(r[0], r[2]) for r in rows]


def test_cache_hit_second_read_does_not_parse(tmp_path: Path) -> None:
    """The second read is served from <dump>.npcache without parsing, with equal rows."""
    write_openmetrics(tmp_path / "d.om", shuffled_samples(30))
    first, second = DumpStats(), DumpStats()
    rows1 = read_rows(tmp_path / "d.om", stats=first, chunk_samples=10)
    rows2 = read_rows(tmp_path / "d.om", stats=second, chunk_samples=10)
    assert (False, 1) == (first.cache_hit, first.parsed_files)
    assert (True, 0) == (second.cache_hit, second.parsed_files)
    assert tmp_path / "d.om.npcache" == second.cache_dir
    assert {"manifest.json", "series.json", "times.npy", "columns.npy", "values.npy"} == {
        p.name for p in (tmp_path / "d.om.npcache").iterdir()
    }
    assert identical(rows1, rows2)
    assert first.samples == second.samples == 121


def test_cache_is_rebuilt_when_the_source_changes(tmp_path: Path) -> None:
    """Changing the dump (size/mtime) invalidates the cache: the new content is read."""
    path = tmp_path / "d.om"
    write_openmetrics(path, [Sample("up", (), 1.0, T0)])
    assert [1.0] == [r[2] for r in read_rows(path)]
    write_openmetrics(path, [Sample("up", (), 0.0, T0), Sample("up", (), 1.0, T0 + 15)])
    stats = DumpStats()
    assert [0.0, 1.0] == [r[2] for r in read_rows(path, stats=stats)]
    assert not stats.cache_hit


def test_cache_remaps_columns_into_a_populated_index(tmp_path: Path) -> None:
    """A cache built with one index serves another that already has other columns."""
    write_openmetrics(tmp_path / "d.om", shuffled_samples(5))
    first = SeriesIndex()
    expected = read_rows(tmp_path / "d.om", first)
    other = SeriesIndex()
    for gpu in range(5):
        other.add("DCGM_FI_DEV_GPU_TEMP", (("node", "x"), ("gpu", str(gpu))))
    other.add("DCGM_FI_DEV_POWER_USAGE", (("Hostname", "node-1"), ("gpu", "1")))  # shared
    stats = DumpStats()
    assert identical(expected, read_rows(tmp_path / "d.om", other, stats=stats))
    assert stats.cache_hit
    assert 5 + len(first) == len(other)


def test_unwritable_cache_falls_back_to_memory_with_warning(tmp_path: Path) -> None:
    """When the cache cannot be created the dump is read in memory and a warning logged."""
    write_openmetrics(tmp_path / "d.om", shuffled_samples(5))
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    stats = DumpStats()
    with capture_logs() as logs:
        rows = read_rows(tmp_path / "d.om", cache_dir=blocker / "cache", stats=stats)
    assert identical(rows, read_rows(tmp_path / "d.om", cache=False))
    assert stats.cache_dir is None
    assert ["warning"] == [e["log_level"] for e in logs if "cache" in e["event"]]


def test_bad_line_error_names_file_and_line(tmp_path: Path) -> None:
    """strict: the first bad line raises with file:line; a missing timestamp counts too."""
    path = tmp_path / "bad.om"
    path.write_text("up 1 1700000000\nup 1 1700000015\nup one 1700000030\nup 1\n")
    with pytest.raises(
        DumpError, match=r"bad\.om:3: invalid value 'one'.*\(2 bad lines in total\)"
    ):
        read_rows(path, cache=False, strict=True)
    tsdb = tmp_path / "bad.txt"
    tsdb.write_text('{__name__="up"} 1 1700000000000\n{__name__="up"} x 1700000015000\n')
    with pytest.raises(DumpError, match=r"bad\.txt:2: bad sample line"):
        read_rows(tsdb, cache=False, strict=True)
    path.write_text("up 1 1700000000\nup 2 1700000001\nup 3 1700000002\nup 1\n")
    with pytest.raises(DumpError, match=r"bad\.om:4: sample without timestamp"):
        read_rows(path, cache=False, strict=True)


def test_few_bad_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    """Tolerant default: 2 bad lines among 300 are skipped, counted and named in the stats."""
    lines = [f"up {i % 2} {T0 + i}" for i in range(300)]
    lines[10], lines[200] = "up{ 1 1700000010", "up 1 17000x"
    path = tmp_path / "mostly-good.om"
    path.write_text("\n".join(lines) + "\n")
    stats = DumpStats()
    rows = read_rows(path, cache=False, stats=stats)
    assert (298, 2, 298) == (len(rows), stats.bad_lines, stats.samples)
    assert stats.errors[0].startswith(f"{path}:11: ")
    assert stats.errors[1].startswith(f"{path}:201: ")


def test_mostly_bad_file_is_rejected(tmp_path: Path) -> None:
    """More than 10 + 1% bad lines rejects the file, naming the first bad line."""
    path = tmp_path / "junk.om"
    path.write_text("up 1 1700000000\n" + "up ? 1\n" * 20)
    with pytest.raises(DumpError, match=r"junk\.om:2: .*\(20 bad lines in total\)"):
        read_rows(path, cache=False)


def test_json_error_response_and_bad_json_raise(tmp_path: Path) -> None:
    """A failed query response and broken JSON are DumpErrors naming the file (and line)."""
    failed = tmp_path / "failed.json"
    failed.write_text(
        json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"})
    )
    with pytest.raises(DumpError, match=r"failed\.json: document 1: the query failed: bad_data"):
        read_rows(failed, cache=False)
    broken = tmp_path / "broken.json"
    broken.write_text('{"status": "success",\n "data": {"resultType": "matrix", "result": [}\n')
    with pytest.raises(DumpError, match=r"broken\.json:2: invalid JSON"):
        read_rows(broken, cache=False)


def test_writer_blocks_types_and_last_duplicate_wins(tmp_path: Path) -> None:
    """Families are contiguous with TYPE first; counters only with _total; last duplicate wins."""
    samples = [
        Sample("c_total", (("a", "1"),), 5.0, T0 + 15),
        Sample("g", (), 1.0, T0 + 15),
        Sample("c_total", (("a", "1"),), 3.0, T0),
        Sample("dcgm_c", (), 7.0, T0),
        Sample("g", (), 2.0, T0),
        Sample("g", (), 9.0, T0),
    ]
    types = {"c": "counter", "g": "gauge", "dcgm_c": "counter"}
    write_openmetrics(tmp_path / "d.om", samples, types)
    assert (
        "# TYPE c counter\n"
        'c_total{a="1"} 3.0 1700000000\n'
        'c_total{a="1"} 5.0 1700000015\n'
        "# TYPE dcgm_c unknown\n"
        "dcgm_c 7.0 1700000000\n"
        "# TYPE g gauge\n"
        "g 9.0 1700000000\n"
        "g 1.0 1700000015\n"
        "# EOF\n"
    ) == (tmp_path / "d.om").read_text()


def test_writer_spilling_to_disk_writes_the_same_file(tmp_path: Path) -> None:
    """With a tiny spill threshold the output equals the all-in-memory output; spill is removed."""
    samples = shuffled_samples(30)
    write_openmetrics(tmp_path / "mem.om", samples)
    with OpenMetricsWriter(tmp_path / "disk.om", spill_samples=5) as writer:
        writer.add_many(samples)
    assert (tmp_path / "mem.om").read_text() == (tmp_path / "disk.om").read_text()
    assert ["disk.om", "mem.om"] == sorted(p.name for p in tmp_path.iterdir())


def test_writer_rejects_sample_without_timestamp_and_writes_nothing(tmp_path: Path) -> None:
    """A sample without a timestamp is a DumpError naming the series; no file appears."""
    with pytest.raises(DumpError, match=r"sample up\{a=\"b\"\} has no timestamp"):
        write_openmetrics(
            tmp_path / "d.om", [Sample("up", (), 1.0, T0), Sample("up", (("a", "b"),), 1.0)]
        )
    assert [] == list(tmp_path.iterdir())


@given(
    st.lists(st.lists(st.integers(0, 30), max_size=25), min_size=1, max_size=6), st.integers(1, 12)
)
@settings(max_examples=60, deadline=None)
def test_merge_runs_equals_a_stable_sort(runs: list[list[int]], batch: int) -> None:
    """K-way merge of sorted runs equals one stable sort of their concatenation."""
    made, tag = [], 0
    for times in runs:
        ordered = np.array(sorted(times), dtype=np.float64)
        ids = np.arange(tag, tag + len(ordered), dtype=np.int32)
        tag += len(ordered)
        made.append(Run(ordered, ids, ordered * 2))
    merged = list(merge_runs(made, batch))
    all_times = np.concatenate([r.times for r in made])
    order = np.argsort(all_times, kind="stable")
    assert (
        np.concatenate([m.ids for m in merged] + [np.empty(0, np.int32)]).tolist()
        == np.concatenate([r.ids for r in made])[order].tolist()
    )


@pytest.mark.tools
def test_promtool_backfills_our_dump_and_dumps_it_back_identical(tmp_path: Path) -> None:
    """promtool create-blocks-from openmetrics accepts our file; its tsdb dump reads back equal."""
    promtool = require_tool("promtool")
    samples = shuffled_samples(50) + [s for s in FIXTURE_SAMPLES if s.value == s.value]
    write_openmetrics(tmp_path / "dump.om", samples, {"DCGM_FI_DEV_POWER_USAGE": "gauge"})
    done = promtool_backfill(tmp_path / "dump.om", tmp_path / "tsdb")
    assert 0 == done.returncode, done.stderr
    (tmp_path / "tsdb" / "wal").mkdir(exist_ok=True)  # promtool 2.42 dump wants a WAL dir
    dumped = subprocess.run(
        [promtool, "tsdb", "dump", str(tmp_path / "tsdb")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (tmp_path / "back.txt").write_text(dumped.stdout)
    index = SeriesIndex()
    assert same_rows(rows_of(samples, index), read_rows(tmp_path / "back.txt", index, cache=False))


def record_node_exporter(real_data: Path, path: Path, scrapes: int) -> tuple[int, int]:
    """Write ``scrapes`` copies of the real node_exporter payload, 15 s apart, as a dump;
    return (samples per scrape, distinct series)."""
    payload = real_data / "exporters" / "node_exporter" / "e2e-output.txt"
    exp = parse_exposition(payload.read_bytes(), str(payload))
    assert [] == exp.errors
    with OpenMetricsWriter(path) as writer:
        for i in range(scrapes):
            writer.add_exposition(exp, default_time=T0 + 15 * i)
    return len(exp.keys), len(set(exp.keys))


def test_real_node_exporter_scrapes_round_trip(real_data: Path, tmp_path: Path) -> None:
    """Three recorded scrapes of the real node_exporter payload read back sample for sample."""
    per_scrape, series = record_node_exporter(real_data, tmp_path / "ne.om.gz", 3)
    stats = DumpStats()
    index = SeriesIndex()
    rows = read_rows(tmp_path / "ne.om.gz", index, cache=False, stats=stats)
    assert (3 * per_scrape, series, 0) == (len(rows), stats.series, stats.bad_lines)
    assert [T0] * per_scrape + [T0 + 15] * per_scrape + [T0 + 30] * per_scrape == [
        r[0] for r in rows
    ]
    text = gzip.decompress((tmp_path / "ne.om.gz").read_bytes()).decode()
    assert "# TYPE node_cpu_seconds counter\nnode_cpu_seconds_total{" in text


@pytest.mark.tools
def test_promtool_backfills_real_node_exporter_recording(real_data: Path, tmp_path: Path) -> None:
    """promtool accepts a recording of real node_exporter output (summary, untyped, counters)."""
    per_scrape, series = record_node_exporter(real_data, tmp_path / "ne.om", 2)
    done = promtool_backfill(tmp_path / "ne.om", tmp_path / "tsdb")
    assert 0 == done.returncode, done.stderr
    summary = done.stdout.strip().splitlines()[-1].split()
    assert (str(2 * per_scrape), str(series)) == (summary[-4], summary[-2])  # samples, series


def test_strict_read_refuses_a_cache_built_with_skipped_lines(tmp_path: Path) -> None:
    """A tolerant read caches the good samples; a later strict read still names the bad line."""
    lines = [f"up 1 {T0 + i}" for i in range(50)]
    lines[20] = "up{ 1 1700000020"
    path = tmp_path / "d.om"
    path.write_text("\n".join(lines) + "\n")
    assert 49 == len(read_rows(path))
    with pytest.raises(DumpError, match=r"d\.om:21: "):
        read_rows(path, strict=True)


def test_truncated_gzip_and_missing_path_raise_dump_errors(tmp_path: Path) -> None:
    """A cut-off .gz and a path that does not exist are DumpErrors naming the file."""
    write_openmetrics(tmp_path / "d.om.gz", shuffled_samples(200))
    data = (tmp_path / "d.om.gz").read_bytes()
    (tmp_path / "cut.om.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DumpError, match=r"cut\.om\.gz: unreadable \(corrupt or truncated gzip"):
        read_rows(tmp_path / "cut.om.gz", cache=False)
    with pytest.raises(DumpError, match=r"nope\.om: no such dump file or directory"):
        read_rows(tmp_path / "nope.om")


def test_writer_add_batch_writes_indexed_columns_with_their_labels(tmp_path: Path) -> None:
    """Batches of index columns are written with identity + context labels and read back."""
    index = SeriesIndex()
    hot = index.add("DCGM_FI_DEV_GPU_TEMP", (("Hostname", "n1"), ("UUID", "GPU-1"), ("gpu", "1")))
    load = index.add("node_load1", (("instance", "n1:9100"),))
    batch = SampleBatch(
        np.array([T0, T0, T0 + 15]), np.array([hot, load, hot]), np.array([70.0, 0.5, 71.0])
    )
    with OpenMetricsWriter(tmp_path / "d.om") as writer:
        writer.add_batch(batch, index)
    text = (tmp_path / "d.om").read_text()
    assert (
        'DCGM_FI_DEV_GPU_TEMP{Hostname="n1",gpu="1",node="n1",uuid="GPU-1"} 71.0 1700000015\n'
        in text
    )
    again = SeriesIndex()
    rows = read_rows(tmp_path / "d.om", again, cache=False)
    assert [(T0, 70.0), (T0, 0.5), (T0 + 15, 71.0)] == [(r[0], r[2]) for r in rows]
    assert [info.labels for info in index.infos] == [info.labels for info in again.infos]
