"""``python -m detector.cli``: the ``detector`` command."""

import sys

from .main import main

sys.exit(main())
