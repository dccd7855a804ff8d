"""SeriesIndex.columns on a known target's later scrapes: the all-known fast path and a page
that mixes known keys with a new one."""

from __future__ import annotations

from detector.ingest.parse import split_series
from detector.model import Labels
from detector.series import SeriesIndex

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
