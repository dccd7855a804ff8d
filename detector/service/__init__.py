"""detector.service"""

from .daemon import main_run
from .state import load_state, save_state

__all__ = ["load_state", "main_run", "save_state"]
