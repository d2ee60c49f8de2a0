"""Command line: ``python -m spark_state {demo,jar}``."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    commands = {
        "demo": "run the demo job",
        "jar": "print the path of the JVM shim jar (built on first use)",
    }
    if not argv or argv[0] not in commands:
        print("usage: python -m spark_state {" + ",".join(commands) + "} [options]", file=sys.stderr)
        for name, text in commands.items():
            print(f"  {name:8} {text}", file=sys.stderr)
        return 2
    if argv[0] == "demo":
        from .demo import main as demo_main

        return demo_main(argv[1:])
    if argv[0] == "jar":
        return _jar(argv[1:])
    return 2


def _jar(argv: list[str]) -> int:
    """Print the shim jar's absolute path, building it if needed; errors go to stderr."""
    import logging

    from .errors import SparkStateError
    from .jvm import jar_path

    if argv:
        print("usage: python -m spark_state jar", file=sys.stderr)
        return 2
    # Show the "building ..." line on stderr: a first build takes a while, stdout stays
    # just the path so that scripts can use $(python -m spark_state jar).
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        print(jar_path())
    except (SparkStateError, OSError) as exc:  # OSError: e.g. an unwritable cache directory
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
