"""detector.service"""

from .daemon import Daemon, main_run, run_daemon

__all__ = ["Daemon", "main_run", "run_daemon"]
