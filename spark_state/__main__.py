"""``python -m spark_state <command>``: see :mod:`spark_state.cli`."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
