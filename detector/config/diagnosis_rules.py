"""The diagnosis taxonomy, rules/diagnosis.yaml: the failure classes, which XIDs each class is,
its recommended action (its own, or from the XID catalog) and its prior (which signals are
evidence for it). Validated by pydantic when loaded, like the other rule files (rules.py);
``DiagnosisRules.check_against`` then checks it against the signal and XID catalogs in use.
detector/diagnosis/ builds its model from it; docs/diagnosis.md explains the classes.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import ConfigError
from .rules import SignalCatalog, XidCatalog, load_rules_file


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DiagnosisClass(_Strict):
    """One failure class of rules/diagnosis.yaml: its XIDs, action and signal prior."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str = Field(min_length=1)
    xids: tuple[int, ...] = ()
    action: str | None = Field(default=None, pattern=r"^[A-Z0-9_/]+$")
    signals: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> DiagnosisClass:
        for signal, weight in self.signals.items():
            if not (weight > 0.0 and weight < float("inf")):
                raise ValueError(f"signals.{signal}: weight must be a finite number > 0")
        return self


UNKNOWN_CLASS = "unknown"


class DiagnosisRules(_Strict):
    """The whole rules/diagnosis.yaml: the failure taxonomy and the diagnosis prior."""

    version: int = 1
    smoothing: float = Field(default=0.05, gt=0.0, allow_inf_nan=False)
    prior_strength: float = Field(default=10.0, ge=0.0, allow_inf_nan=False)
    classes: tuple[DiagnosisClass, ...]

    @model_validator(mode="after")
    def _check(self) -> DiagnosisRules:
        names = [c.name for c in self.classes]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"class name {twice[0]!r} is used twice")
        if UNKNOWN_CLASS not in names:
            raise ValueError(f"a class named {UNKNOWN_CLASS!r} is required (the fallback)")
        owner: dict[int, str] = {}
        for cls in self.classes:
            for code in cls.xids:
                if code in owner:
                    raise ValueError(f"xid {code} is in both {owner[code]!r} and {cls.name!r}")
                owner[code] = cls.name
        return self

    def class_of_xid(self, code: int) -> str:
        """The class an XID code belongs to ('unknown' for a code no class lists)."""
        for cls in self.classes:
            if code in cls.xids:
                return cls.name
        return UNKNOWN_CLASS

    def check_against(self, signals: SignalCatalog, xids: XidCatalog, where: str) -> None:
        """ConfigError when a class names a signal the signal catalog lacks, or lacks an action
        the XID catalog cannot supply (``where`` names the diagnosis rules file)."""
        known = {rule.name for rule in signals.signals}
        for i, cls in enumerate(self.classes):
            for signal in cls.signals:
                if signal not in known:
                    raise ConfigError(
                        f"{where}: classes[{i}].signals.{signal}: no such signal in the signal "
                        "rules (rules/signals.yaml)"
                    )
            if cls.action is None and cls.name != UNKNOWN_CLASS and not cls.xids:
                raise ConfigError(
                    f"{where}: classes[{i}].action: class {cls.name!r} lists no XIDs, so it "
                    "must name its action"
                )

    def action_of(self, name: str, xids: XidCatalog) -> str:
        """The recommended action of class ``name`` (the module doc of rules/diagnosis.yaml):
        its own, else the most common of its failure XIDs' actions in ``xids`` (of all its
        XIDs when none is a failure; ties: the first code listed), else the catalog's action
        for unknown codes."""
        cls = next((c for c in self.classes if c.name == name), None)
        if cls is None:
            return xids.unknown.action
        if cls.action is not None:
            return cls.action
        rules = [rule for rule in (xids.get(code) for code in cls.xids) if rule is not None]
        pool = [rule.action for rule in rules if rule.failure] or [rule.action for rule in rules]
        if not pool:
            return xids.unknown.action
        return max(dict.fromkeys(pool), key=pool.count)  # first listed wins a tie


def load_diagnosis_rules(path: Path | None = None) -> DiagnosisRules:
    """Load and validate a diagnosis taxonomy (a file, a rules directory, or the built-in
    one). Check it against the catalogs in use with ``DiagnosisRules.check_against``."""
    return load_rules_file(path, "diagnosis.yaml", DiagnosisRules)
