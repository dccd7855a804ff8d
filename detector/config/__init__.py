"""detector.config"""

from .calibration_file import (
    Achieved,
    Calibration,
    DiagnosisCounts,
    FittedOn,
    load_calibration,
    save_calibration,
)
from .diagnosis_rules import UNKNOWN_CLASS, DiagnosisClass, DiagnosisRules, load_diagnosis_rules
from .load import describe_config, load_config
from .rules import SignalCatalog, XidCatalog, export_pattern, load_signal_rules, load_xid_catalog
from .schema import AlertsConfig, Config, LabelsConfig, ScrapeConfig, Shard

__all__ = [
    "UNKNOWN_CLASS",
    "Achieved",
    "AlertsConfig",
    "Calibration",
    "Config",
    "DiagnosisClass",
    "DiagnosisCounts",
    "DiagnosisRules",
    "FittedOn",
    "LabelsConfig",
    "ScrapeConfig",
    "Shard",
    "SignalCatalog",
    "XidCatalog",
    "describe_config",
    "export_pattern",
    "load_calibration",
    "load_config",
    "load_diagnosis_rules",
    "load_signal_rules",
    "load_xid_catalog",
    "save_calibration",
]
