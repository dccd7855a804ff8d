"""detector.service"""

from .daemon import main_run

__all__ = ["main_run"]
