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
from .reference import config_reference, undescribed_fields
from .rules import (
    SUMMARY_PREFIX,
    SUMMARY_SIGNAL_METRIC,
    SignalCatalog,
    XidCatalog,
    counter_family,
    export_pattern,
    load_signal_rules,
    load_xid_catalog,
    other_spelling,
)
from .schema import (
    DEFAULT_THRESHOLD,
    ActionsConfig,
    AlertsConfig,
    Config,
    EvaluationConfig,
    LabelsConfig,
    RemoteWriteConfig,
    ScoringConfig,
    ScrapeConfig,
    Shard,
)

__all__ = [
    "DEFAULT_THRESHOLD",
    "SUMMARY_PREFIX",
    "SUMMARY_SIGNAL_METRIC",
    "UNKNOWN_CLASS",
    "Achieved",
    "ActionsConfig",
    "AlertsConfig",
    "Calibration",
    "Config",
    "DiagnosisClass",
    "DiagnosisCounts",
    "DiagnosisRules",
    "EvaluationConfig",
    "FittedOn",
    "LabelsConfig",
    "RemoteWriteConfig",
    "ScoringConfig",
    "ScrapeConfig",
    "Shard",
    "SignalCatalog",
    "XidCatalog",
    "config_reference",
    "counter_family",
    "describe_config",
    "export_pattern",
    "load_calibration",
    "load_config",
    "load_diagnosis_rules",
    "load_signal_rules",
    "load_xid_catalog",
    "other_spelling",
    "save_calibration",
    "undescribed_fields",
]
