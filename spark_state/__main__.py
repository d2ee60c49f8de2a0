"""Command line: ``python -m spark_state {demo}``."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    commands = {"demo": "run the demo job"}
    if not argv or argv[0] not in commands:
        print("usage: python -m spark_state {" + ",".join(commands) + "} [options]", file=sys.stderr)
        for name, text in commands.items():
            print(f"  {name:8} {text}", file=sys.stderr)
        return 2
    if argv[0] == "demo":
        from .demo import main as demo_main

        return demo_main(argv[1:])
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
