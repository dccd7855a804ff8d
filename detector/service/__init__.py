"""detector.service"""

from .daemon import Daemon, main_run, run_daemon
from .state import load_state, save_state

__all__ = ["Daemon", "load_state", "main_run", "run_daemon", "save_state"]
