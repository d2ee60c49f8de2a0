"""The commands about running spark-state: ``demo`` (the demo job), ``jar`` (the JVM shim jar's path)
and ``server-conf`` (the confs of a Spark driver started elsewhere, e.g. a Spark Connect server)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Sequence

from ..errors import SparkStateError
from ..spark.lines import LINES
from .arguments import FAILURES, failed, pairs


def demo(argv: Sequence[str]) -> int:
    """Run the demo job; it parses its own options."""
    from ..demos.query import main as demo_main

    return demo_main(list(argv))


def add_commands(sub) -> None:
    """Add the demo, jar and server-conf commands to the subparsers ``sub``."""
    sub.add_parser("demo", help="run the demo job (python -m spark_state demo --help)")

    p = sub.add_parser("jar", help="print the path of the JVM shim jar of the installed pyspark's Spark line (the "
                                   "packaged one; built on first use in a source checkout)",
                       description="Print the shim jar's absolute path for a Spark line (default: the installed "
                                   "pyspark's): the jar packaged in the installed wheel, which carries one per "
                                   "supported line (nothing is compiled), or in a source checkout the jar compiled "
                                   "from its sources (on first use, ~10 s, into ~/.cache/spark-state).")
    p.add_argument("--spark", metavar="LINE",
                   help="the Spark line of the cluster, e.g. 3.5 or 4.2 (a version such as 4.2.1 will do): for a "
                        "spark-submit whose driver has no pyspark; supported: "
                        + ", ".join(line.name for line in LINES))
    p.set_defaults(run=_jar)

    p = sub.add_parser(
        "server-conf", help="print the Spark confs of a driver that runs spark-state (e.g. a Spark Connect server)",
        description="Print the confs spark_state.configure() would set (the shim jar, the state store provider, "
                    "the Python of the workers, engine options) for a Spark driver started elsewhere: "
                    "start-connect-server.sh $(spark-state server-conf), or spark-submit. Default output: "
                    "spark-submit arguments (--conf KEY=VALUE ...).")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the confs as one JSON object")
    out.add_argument("--properties", action="store_true", help="print spark-defaults.conf lines (KEY VALUE)")
    p.add_argument("--backend", choices=("rocksdb", "hashmap"), help="engine backend (default: the engine's, rocksdb)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="engine / provider option, e.g. snapshotInterval=20 (as in configure(options=...)), repeatable")
    p.add_argument("--python", help="the Python the server's workers run, with spark-state installed "
                                    "(default: the Python running this command)")
    p.set_defaults(run=_server_conf)


def _server_conf(args) -> int:
    """Print :func:`spark_state.server_confs` as spark-submit arguments, properties or JSON."""
    import shlex

    from ..spark.session import server_confs

    try:
        confs = server_confs(backend=args.backend, options=pairs(args.option, "--option"), python=args.python)
    except FAILURES as exc:
        return failed(exc, args.json)
    if args.json:
        print(json.dumps(confs, indent=1))
    elif args.properties:
        print("\n".join(f"{key} {value}" for key, value in confs.items()))
    else:
        print(" ".join(f"--conf {shlex.quote(f'{key}={value}')}" for key, value in confs.items()))
    return 0


def _jar(args) -> int:
    """Print the shim jar's absolute path, building it if needed; errors go to stderr."""
    from ..spark.jvm import jar_path

    # Show the "building ..." line on stderr: a first build takes a while, stdout stays
    # just the path so that scripts can use $(python -m spark_state jar).
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        print(jar_path(line=args.spark))
    except (SparkStateError, OSError) as exc:  # OSError: e.g. an unwritable cache directory
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
