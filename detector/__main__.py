"""``python -m detector``: the ``detector`` command."""

import sys

from .cli import main

sys.exit(main())
