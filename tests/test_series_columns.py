"""SeriesIndex.columns on a known target's later scrapes: the all-known fast path and a page
that mixes known keys with a new one; a target relabelled with its node's next job."""

from __future__ import annotations

from detector.ingest.parse import split_series
from detector.model import Labels
from detector.series.index import SeriesIndex
from detector.series.labels import LabelRules

TARGET = (("instance", "n1:9400"),)


def test_new_key_among_known_ones_gets_a_new_column_and_keeps_the_others() -> None:
    """Reordered known keys keep their columns; only the new key is split and appended."""
    calls: list[str] = []

    def counting_split(key: str) -> tuple[str, Labels]:
        calls.append(key)
        return split_series(key)

    index = SeriesIndex()
    first = index.columns(['m{gpu="0"}', 'm{gpu="1"}'], counting_split, TARGET).tolist()
    later = index.columns(['m{gpu="1"}', 'm{gpu="2"}', 'm{gpu="0"}'], counting_split, TARGET)
    assert [first[1], 2, first[0]] == later.tolist()
    assert ['m{gpu="0"}', 'm{gpu="1"}', 'm{gpu="2"}'] == calls
    assert [] == index.columns([], counting_split, TARGET).tolist()


def test_a_relabelled_target_keeps_its_series_columns() -> None:
    """A target whose cohort label the scheduler rewrites (job a, then b, then a again, or a
    first job where it had none): each scrape's series keep their columns, take the new
    labels and are listed in ``relabelled`` for the signal stage; the index does not grow.
    Without that label among the relabel labels, or through ``add`` (a dump's series), each
    labelling is a series of its own."""
    keys = ['DCGM_FI_DEV_GPU_TEMP{gpu="0"}', "node_load1"]

    def target(job: str) -> tuple[tuple[str, str], ...]:
        return (*TARGET, ("training_job", job))

    index = SeriesIndex(LabelRules(cohort_labels=("training_job",)))
    first = index.columns(keys, split_series, target("a")).tolist()
    assert [] == index.relabelled
    for job in ("b", "a", "b"):
        assert first == index.columns(keys, split_series, target(job)).tolist()
        assert first == sorted(set(index.relabelled))
        index.relabelled.clear()
        assert {job} == {dict(index.infos[c].labels)["training_job"] for c in first}
        assert 2 == len(index)
    restored = SeriesIndex(LabelRules(cohort_labels=("training_job",)))
    restored.extend_from(index.infos)
    assert first == restored.columns(keys, split_series, target("c")).tolist()
    assert 2 == len(restored)

    # a node's targets before its first job carry no job label
    fresh = SeriesIndex(LabelRules(cohort_labels=("training_job",)))
    before = fresh.columns(keys, split_series, TARGET).tolist()
    assert before == fresh.columns(keys, split_series, target("a")).tolist()
    assert 2 == len(fresh)

    plain = SeriesIndex()
    plain.columns(keys, split_series, target("a"))
    assert [2, 3] == plain.columns(keys, split_series, target("b")).tolist()
    dump = SeriesIndex(LabelRules(cohort_labels=("training_job",)))
    assert [0, 1] == [dump.add("m", (("node", "n1"), ("training_job", j))) for j in "ab"]
