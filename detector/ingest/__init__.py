"""The ingest stage."""

from .dumps.read import DumpStats, read_dump
from .dumps.store import load_array
from .dumps.writer import OpenMetricsWriter
from .events import load_events, place_events
from .jobs import load_jobs, parse_jobs, write_jobs
from .kmsg import KernelXids, KmsgFollower
from .kubernetes import KubeApi, PodDiscovery
from .record import RoundRecorder, run_record
from .remote_write import SAMPLE_RESULTS, RemoteWriteSource, RemoteWriteStats
from .scrape import Scraper, ScrapeRound
from .targets import TargetSource

__all__ = [
    "SAMPLE_RESULTS",
    "DumpStats",
    "KernelXids",
    "KmsgFollower",
    "KubeApi",
    "OpenMetricsWriter",
    "PodDiscovery",
    "RemoteWriteSource",
    "RemoteWriteStats",
    "RoundRecorder",
    "ScrapeRound",
    "Scraper",
    "TargetSource",
    "load_array",
    "load_events",
    "load_jobs",
    "parse_jobs",
    "place_events",
    "read_dump",
    "run_record",
    "write_jobs",
]
