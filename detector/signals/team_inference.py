"""Where no label names a GPU's job: the two followers that infer its team, fed each tick.

Co-movement (gpu_comovement.py, ``labels.gpu_workload_comovement``) reads a GPU signal's
power and tells a node's jobs apart by how their GPUs move together; activity
(gpu_activity.py, ``labels.gpu_activity_signal``) reads utilization and keeps GPUs at rest
apart from working ones, and a job that starts beside a running one apart from it. Both see
only GPUs no workload label names (a label always wins) and both report moves, which
``GpuTeams`` turns into team ids; ``SignalMap`` (signals.py) applies them to the GPUs'
columns at its next sync. Either follower is None when its setting is null.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from ..errors import ConfigError
from ..model import FloatArray, IntArray
from ..series import LabelRules
from .gpu_activity import GpuActivity
from .gpu_comovement import CoMovingGpus
from .gpu_teams import GpuTeams

_PREFIXES = ("comoving_", "activity_")  # their keys in the signal map's saved state
COMOVEMENT_COLUMN, ACTIVITY_COLUMN = "comovement_column", "activity_column"


class TeamInference:
    """Co-movement and activity for the GPUs of a signal map (module docstring)."""

    def __init__(self, rules: LabelRules, gpu_signals: Sequence[str], teams: GpuTeams) -> None:
        self.teams = teams
        self.comovement_signal = rules.workload_comovement
        self.activity_signal = rules.activity_signal
        comovement = _followed("gpu_workload_comovement", self.comovement_signal, gpu_signals)
        activity = _followed("gpu_activity_signal", self.activity_signal, gpu_signals)
        self.comoving = CoMovingGpus() if comovement else None
        self.activity = GpuActivity() if activity else None

    def add_gpu(self, entity: int, node_id: int) -> None:
        """GPU entity ``entity`` (the next id) of node ``node_id``."""
        if self.comoving is not None:
            self.comoving.add_gpu(entity, node_id)
        if self.activity is not None:
            self.activity.add_gpu(entity, node_id)

    def columns(
        self,
        entities: int,
        entity_columns: Mapping[int, list[int]],
        names: Sequence[str],
        signal: Sequence[int],
    ) -> dict[str, IntArray]:
        """Per GPU entity (``entities`` of them) its column of the co-movement signal and of
        the activity signal (-1: none; no entities for a follower that is off), under
        ``COMOVEMENT_COLUMN`` and ``ACTIVITY_COLUMN``; ``entity_columns``: each GPU's
        columns, ``names`` and ``signal``: the columns' signal names and ids."""

        def first_of(name: str | None) -> IntArray:
            found = np.full(entities if name is not None else 0, -1, dtype=np.int64)
            for entity, cols in entity_columns.items() if name is not None else ():
                hits = [c for c in cols if names[signal[c]] == name]
                found[entity] = hits[0] if hits else -1
            return found

        return {
            COMOVEMENT_COLUMN: first_of(
                self.comovement_signal if self.comoving is not None else None
            ),
            ACTIVITY_COLUMN: first_of(self.activity_signal if self.activity is not None else None),
        }

    def observe(self, t: float, out: FloatArray, columns: Mapping[str, IntArray]) -> None:
        """Feed this tick's signal values ``out`` to the followers (``columns``: holding
        ``columns``' result), GPUs a workload label names left out."""
        if self.comoving is not None:
            self.comoving.observe(t, self._per_gpu(out, columns[COMOVEMENT_COLUMN]))
        if self.activity is not None:
            self.activity.observe(t, self._per_gpu(out, columns[ACTIVITY_COLUMN]))

    def _per_gpu(self, out: FloatArray, col: IntArray) -> FloatArray:
        values = np.where(col >= 0, out[np.maximum(col, 0)] if out.size else np.nan, np.nan)
        values[self.teams.labelled_mask(col.shape[0])] = np.nan
        return values

    def moves(self) -> Iterator[tuple[int, int | None]]:
        """(GPU entity, its new team id or None for none) for every GPU a follower moved since
        the last call: co-movement's first, then activity's."""
        if self.comoving is not None:
            for entity, key in self.comoving.take_changes():
                yield entity, self.teams.infer(entity, key)
        if self.activity is not None:
            for entity, resting, crew in self.activity.take_changes():
                yield entity, self.teams.rest(entity, resting, crew)

    def state_dict(self) -> dict[str, np.ndarray]:
        state: dict[str, np.ndarray] = {}
        for prefix, part in zip(_PREFIXES, (self.comoving, self.activity), strict=True):
            if part is not None:
                state |= {prefix + k: v for k, v in part.state_dict().items()}
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore ``state_dict`` output (a follower's keys absent, as in states saved before
        it existed: it starts afresh); the moves apply at the next sync."""
        for prefix, part in zip(_PREFIXES, (self.comoving, self.activity), strict=True):
            own = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            if part is not None and own:
                part.load_state_dict(own)


def _followed(setting: str, signal: str | None, gpu_signals: Sequence[str]) -> bool:
    """Whether ``labels.<setting>`` names a signal to follow (None: off); it must be one of
    ``gpu_signals``, the rules' GPU signals, else ConfigError naming the setting."""
    if signal is None:
        return False
    if signal not in gpu_signals:
        known = ", ".join(sorted(gpu_signals)) or "none"
        raise ConfigError(
            f"labels.{setting}: {signal!r} is no GPU signal of the rules (they have: "
            f"{known}); name one, or null to turn it off"
        )
    return True
