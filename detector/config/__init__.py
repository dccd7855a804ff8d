"""detector.config"""

from .calibration_file import Achieved, Calibration, FittedOn, load_calibration, save_calibration
from .load import describe_config, load_config
from .reference import config_reference, undescribed_fields
from .rules import SignalCatalog, XidCatalog, export_pattern, load_signal_rules, load_xid_catalog
from .schema import ActionsConfig, AlertsConfig, Config, LabelsConfig, ScrapeConfig, Shard

__all__ = [
    "Achieved",
    "ActionsConfig",
    "AlertsConfig",
    "Calibration",
    "Config",
    "FittedOn",
    "LabelsConfig",
    "ScrapeConfig",
    "Shard",
    "SignalCatalog",
    "XidCatalog",
    "config_reference",
    "describe_config",
    "export_pattern",
    "load_calibration",
    "load_config",
    "load_signal_rules",
    "load_xid_catalog",
    "save_calibration",
    "undescribed_fields",
]
