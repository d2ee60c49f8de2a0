"""``spark-state upgrade-check``: the command of :func:`spark_state.upgrade.check_upgrade`."""

from __future__ import annotations

from .arguments import command, local_spark, storage_options


def add_commands(sub) -> None:
    """Add ``upgrade-check`` to the subparsers ``sub``."""
    p = command(sub, "upgrade-check",
                "tell, without running it, whether a changed query restarts on a checkpoint: plan the new query with "
                "Spark's planner and compare each stateful operator with what the checkpoint holds (exit status 0: "
                "compatible as is; 1: Spark refuses it, or it needs a migration first)", _upgrade_check)
    p.add_argument("checkpoint", help="the query's checkpointLocation")
    p.add_argument("--query", required=True, metavar="MODULE:FUNCTION",
                   help="the function that builds the new query's streaming DataFrame from a SparkSession (what is "
                        "passed to writeStream): package.module:function, or path/to/file.py:function")
    p.add_argument("--output-mode", choices=("append", "update", "complete"), default="append",
                   help="the output mode the new query starts with (default append, as Spark's)")
    p.add_argument("--master", default="local[2]", help="the Spark master of the session that plans (default local[2])")


def _upgrade_check(args):
    from ..upgrade import check_upgrade, load_query_builder

    builder = load_query_builder(args.query)
    with local_spark(args.master, "spark-state upgrade-check") as spark:
        report = check_upgrade(spark, args.checkpoint, builder, output_mode=args.output_mode,
                               storage_options=storage_options(args))
    return report.to_dict(), report.summary(), report.exit_status
