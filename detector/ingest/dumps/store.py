"""Sorting a dump by time with bounded memory, and its on-disk numpy cache.

Sorting (external merge sort): samples are buffered up to ``chunk_samples``, each full buffer
is stable-sorted by time into a *run* (kept in memory, or spilled as .npy files and memory-
mapped back when a cache is being built), and the runs are merged k-way: each merge step picks
a pivot time such that no run gives more than ``chunk_samples / k`` samples (plus ties) at or
before it, takes those prefixes (``searchsorted`` on the memmaps), and stable-sorts just them.
Memory is O(chunk_samples) whatever the dump size; equal times keep file order.

Cache layout (``<dump>.npcache/``), written to a temporary sibling and renamed into place:

    manifest.json   format version, the source files (absolute path, size, mtime_ns), sample
                    and bad-line counts. The cache is valid only if the sources still match.
    series.json     the raw series [[name, [[label, value], ...]], ...]: cache column i is
                    series i. Raw, not normalized: the reader maps them through whatever
                    SeriesIndex (rules, existing columns) it is given, so one cache serves any.
    times.npy       float64 seconds, sorted (stable)
    columns.npy     int32 cache column of each sample
    values.npy      float64
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...model import FloatArray, Labels
from .formats import IdArray, RawChunk

CACHE_VERSION = 1
_ARRAYS = {"times": np.float64, "columns": np.int32, "values": np.float64}


@dataclass(slots=True)
class Run:
    """Samples sorted by time (stable); arrays may be memory-mapped files."""

    times: FloatArray
    ids: IdArray
    values: FloatArray

    def __len__(self) -> int:
        return int(self.times.shape[0])


class RunBuilder:
    """Collects raw chunks into sorted runs of about ``chunk_samples`` samples each."""

    def __init__(self, chunk_samples: int, spill_dir: Path | None = None) -> None:
        self.chunk_samples = max(1, chunk_samples)
        self.spill_dir = spill_dir
        self.runs: list[Run] = []
        self._buffer: list[RawChunk] = []
        self._buffered = 0

    def add(self, chunk: RawChunk) -> None:
        self._buffer.append(chunk)
        self._buffered += len(chunk)
        if self._buffered >= self.chunk_samples:
            self._flush()

    def finish(self) -> list[Run]:
        self._flush()
        return self.runs

    def _flush(self) -> None:
        if not self._buffered:
            return
        times = np.concatenate([c.times for c in self._buffer])
        order = np.argsort(times, kind="stable")
        run = Run(
            times[order],
            np.concatenate([c.ids for c in self._buffer])[order],
            np.concatenate([c.values for c in self._buffer])[order],
        )
        self._buffer, self._buffered = [], 0
        if self.spill_dir is not None:
            run = _spill(run, self.spill_dir / f"run{len(self.runs):05d}")
        self.runs.append(run)


def _spill(run: Run, stem: Path) -> Run:
    stem.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "times": run.times,
        "columns": run.ids,
        "values": run.values,
    }
    for name, array in arrays.items():
        np.save(f"{stem}.{name}.npy", array)
    loaded = {name: load_array(Path(f"{stem}.{name}.npy")) for name in arrays}
    return Run(loaded["times"], loaded["columns"], loaded["values"])


def load_array(path: Path) -> Any:
    """A .npy file memory-mapped read-only (an empty one cannot be mapped: read it)."""
    try:
        return np.load(path, mmap_mode="r")
    except ValueError:
        return np.load(path)


def merge_runs(runs: Sequence[Run], batch: int) -> Iterator[Run]:
    """Sorted batches of about ``batch`` samples (more only on equal times) over all runs."""
    active = [run for run in runs if len(run)]
    cursor = [0] * len(active)
    while active:
        step = max(1, batch // len(active))
        pivot = np.inf  # the earliest time any run reaches within ``step`` samples
        for run, pos in zip(active, cursor, strict=True):
            if pos + step < len(run):
                pivot = min(pivot, float(run.times[pos + step - 1]))
        parts: list[Run] = []
        for i, run in enumerate(active):
            pos = cursor[i]
            end = len(run)
            if pivot != np.inf:
                end = pos + int(np.searchsorted(run.times[pos:], pivot, side="right"))
            if end > pos:
                parts.append(Run(run.times[pos:end], run.ids[pos:end], run.values[pos:end]))
                cursor[i] = end
        left = [i for i, run in enumerate(active) if cursor[i] < len(run)]
        active, cursor = [active[i] for i in left], [cursor[i] for i in left]
        times = np.concatenate([p.times for p in parts])
        order = np.argsort(times, kind="stable")  # a single part is already sorted: cheap
        yield Run(
            times[order],
            np.concatenate([p.ids for p in parts])[order],
            np.concatenate([p.values for p in parts])[order],
        )


def source_signature(files: Sequence[Path]) -> list[list[Any]]:
    """What the cache is valid for: each source file's absolute path, size and mtime."""
    out: list[list[Any]] = []
    for path in files:
        stat = path.stat()
        out.append([str(path.resolve()), stat.st_size, stat.st_mtime_ns])
    return out


@dataclass(slots=True)
class Cache:
    """An opened, valid cache: memory-mapped sorted arrays and the raw series they index."""

    directory: Path
    times: FloatArray
    columns: IdArray
    values: FloatArray
    series: list[tuple[str, Labels]]
    manifest: dict[str, Any]


def open_cache(directory: Path, signature: list[list[Any]]) -> Cache | None:
    """The cache in ``directory`` if it exists, is complete and matches the sources."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
        if manifest.get("version") != CACHE_VERSION or manifest.get("sources") != signature:
            return None
        raw = json.loads((directory / "series.json").read_text())
        series = [(str(name), tuple((str(k), str(v)) for k, v in labels)) for name, labels in raw]
        arrays = {name: load_array(directory / f"{name}.npy") for name in _ARRAYS}
    except (OSError, ValueError, TypeError):  # absent, partial or foreign: rebuild
        return None
    sizes = {int(a.shape[0]) for a in arrays.values()}
    if sizes != {int(manifest.get("samples", -1))}:
        return None
    return Cache(directory, arrays["times"], arrays["columns"], arrays["values"], series, manifest)


def write_cache(
    directory: Path,
    runs: Sequence[Run],
    series: Sequence[tuple[str, Labels]],
    manifest: dict[str, Any],
    batch: int,
) -> None:
    """Merge the runs into ``directory`` (a fresh temporary directory). Raises OSError."""
    total = sum(len(run) for run in runs)
    outputs: dict[str, Any] = {}
    for name, dtype in _ARRAYS.items():
        path = directory / f"{name}.npy"
        if total:
            outputs[name] = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(total,))
        else:
            np.save(path, np.empty(0, dtype=dtype))
    pos = 0
    if total:
        for merged in merge_runs(runs, batch):
            end = pos + len(merged)
            outputs["times"][pos:end] = merged.times
            outputs["columns"][pos:end] = merged.ids
            outputs["values"][pos:end] = merged.values
            pos = end
        for array in outputs.values():
            array.flush()
    outputs.clear()
    names = [[name, [list(kv) for kv in labels]] for name, labels in series]
    (directory / "series.json").write_text(json.dumps(names))
    (directory / "manifest.json").write_text(
        json.dumps({"version": CACHE_VERSION, **manifest, "samples": total})
    )


def install_cache(tmp: Path, directory: Path) -> None:
    """Replace ``directory`` (a stale cache, if any) by the freshly written ``tmp``."""
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
