"""The calibration file on disk: ``detector calibrate`` writes it, ``run`` and ``replay`` read it.

JSON, or YAML by suffix (read with the project's strict YAML reader, yamlfile.py); the content
is ``Calibration`` below, validated by pydantic. A bad file raises ConfigError naming the
file and each bad field. Writes are atomic (temporary file + rename).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError
from .load import plain_message
from .yamlfile import parse_yaml

Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Weight = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FittedOn(_Strict):
    """What history the calibration was fitted on."""

    dump: str
    days: float = Field(gt=0.0, allow_inf_nan=False)
    failures: int = Field(ge=0)


class Achieved(_Strict):
    """What the chosen threshold achieved on that history."""

    detected: int = Field(ge=0)
    detected_before: int = Field(ge=0)
    fp_per_day: float = Field(ge=0.0, allow_inf_nan=False)


class DiagnosisCounts(_Strict):
    """What ``detector calibrate`` learned for the diagnosis (detector/diagnosis/learn.py): per
    failure class (of the XID that followed), the detected failures learned from, and per
    signal how much it led their first alerts (rank-weighted counts). Added to the prior of
    rules/diagnosis.yaml when the model is built; absent: the prior alone."""

    failures: dict[str, Annotated[int, Field(ge=0)]]
    signals: dict[str, dict[str, Annotated[float, Field(ge=0.0, allow_inf_nan=False)]]]
    # Multiplies the evidence's weight, fitted so the confidence matches how often the class
    # was right on the history (leave-one-out); 1: not fitted.
    temperature: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)


class Calibration(_Strict):
    """The calibration file that ``run`` and ``replay`` load (version 1)."""

    version: Literal[1] = 1
    threshold: Unit
    # Multipliers of the rules' fusion weights by signal name (fitting.py), absent: 1.
    signal_weights: dict[str, Weight] | None = None
    fp_budget_per_day: float = Field(ge=0.0, allow_inf_nan=False)
    fitted_on: FittedOn
    achieved: Achieved
    created: AwareDatetime
    # Optional, so files written before it load unchanged.
    diagnosis: DiagnosisCounts | None = None


def save_calibration(path: Path, calibration: Calibration) -> None:
    """Write the file atomically (temp file + rename): JSON, or YAML for .yaml/.yml."""
    document = calibration.model_dump(mode="json", exclude_none=True)
    if path.suffix in (".yaml", ".yml"):
        text = yaml.safe_dump(document, sort_keys=False)
    else:
        text = json.dumps(document, indent=2) + "\n"
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def load_calibration(path: Path) -> Calibration:
    """Read and validate a calibration file; ConfigError names the file and each bad field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or exc
        raise ConfigError(f"{path}: cannot read calibration file: {reason}") from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"{path}: not a calibration file (not UTF-8 text; 'detector calibrate' writes JSON)"
        ) from None
    document: Any
    try:
        if path.suffix in (".yaml", ".yml"):
            document = parse_yaml(text, str(path))  # ConfigError with path:line:column
        else:
            document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        return Calibration.model_validate(document)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        top = list(Calibration.model_fields)  # suggested for a top-level key only
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in e['loc'])!r}: "
            f"{plain_message(e, keys=top if len(e['loc']) == 1 else None)}"
            for e in errors
        )
        missing = sum(1 for e in errors if e["type"] == "missing")
        hint = " ('detector calibrate' writes every required key)" if missing else ""
        raise ConfigError(f"{path}: invalid calibration: {problems}{hint}") from None
