"""detector.config"""

from .calibration_file import Achieved, Calibration, FittedOn, load_calibration, save_calibration
from .load import describe_config, load_config
from .rules import (
    SignalCatalog,
    XidCatalog,
    counter_family,
    export_pattern,
    load_signal_rules,
    load_xid_catalog,
    other_spelling,
)
from .schema import AlertsConfig, Config, LabelsConfig, ScrapeConfig, Shard

__all__ = [
    "Achieved",
    "AlertsConfig",
    "Calibration",
    "Config",
    "FittedOn",
    "LabelsConfig",
    "ScrapeConfig",
    "Shard",
    "SignalCatalog",
    "XidCatalog",
    "counter_family",
    "describe_config",
    "export_pattern",
    "load_calibration",
    "load_config",
    "load_signal_rules",
    "load_xid_catalog",
    "other_spelling",
    "save_calibration",
]
