"""detector.series"""

from .frame import frames_from_batches, merge_frames
from .index import SeriesIndex
from .labels import (
    SCRAPE_HEALTH_METRICS,
    LabelRules,
    group_value,
    host_names,
    normalize,
    pod_named_nodes,
    raw_grouping,
    without,
    workload_of,
)

__all__ = [
    "SCRAPE_HEALTH_METRICS",
    "LabelRules",
    "SeriesIndex",
    "frames_from_batches",
    "group_value",
    "host_names",
    "merge_frames",
    "normalize",
    "pod_named_nodes",
    "raw_grouping",
    "without",
    "workload_of",
]
