"""detector.config"""

from .calibration_file import Achieved, Calibration, FittedOn, load_calibration, save_calibration
from .load import describe_config, load_config
from .rules import SignalCatalog, XidCatalog, export_pattern, load_signal_rules, load_xid_catalog
from .schema import AlertsConfig, Config, LabelsConfig, RemoteWriteConfig, ScrapeConfig, Shard

__all__ = [
    "Achieved",
    "AlertsConfig",
    "Calibration",
    "Config",
    "FittedOn",
    "LabelsConfig",
    "RemoteWriteConfig",
    "ScrapeConfig",
    "Shard",
    "SignalCatalog",
    "XidCatalog",
    "describe_config",
    "export_pattern",
    "load_calibration",
    "load_config",
    "load_signal_rules",
    "load_xid_catalog",
    "save_calibration",
]
