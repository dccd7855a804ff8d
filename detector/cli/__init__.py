"""The command line: ``detector run | replay | calibrate | record | simulate | ...``.

``main`` parses the arguments (args.py), checks them against each other (checks.py) and calls
the driver of the subcommand (main.py). Only this folder exits the process.
"""

from .main import main

__all__ = ["main"]
