"""``spark-state upgrade-check`` and ``spark-state carry-over``: the commands of
:func:`spark_state.upgrade.check_upgrade` and :class:`spark_state.upgrade.CarryOver`."""

from __future__ import annotations

from typing import Union

from .arguments import command, local_spark, storage_options


def add_commands(sub) -> None:
    """Add ``upgrade-check`` and ``carry-over`` to the subparsers ``sub``."""
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
    add_carry_over(sub)


def _upgrade_check(args):
    from ..upgrade import check_upgrade, load_query_builder

    builder = load_query_builder(args.query)
    with local_spark(args.master, "spark-state upgrade-check") as spark:
        report = check_upgrade(spark, args.checkpoint, builder, output_mode=args.output_mode,
                               storage_options=storage_options(args))
    return report.to_dict(), report.summary(), report.exit_status


def add_carry_over(sub) -> None:
    """Add ``carry-over`` to the subparsers ``sub``."""
    p = command(sub, "carry-over",
                "carry a savepoint's state over to a changed query: key changes (a column added, dropped, renamed, "
                "reordered or widened) and stateful operators moved, added or removed; writes a new savepoint to "
                "restore the new query from (Spark 4.0+; a new operator's state from history: the Python API's "
                "CarryOver.set_state)", _carry_over)
    p.add_argument("savepoint", help="the savepoint of the old query (spark-state savepoint)")
    p.add_argument("target", help="the new savepoint's directory (new or empty)")
    p.add_argument("--query", required=True, metavar="MODULE:FUNCTION",
                   help="the function that builds the new query's streaming DataFrame from a SparkSession")
    p.add_argument("--output-mode", choices=("append", "update", "complete"), default="append",
                   help="the output mode the new query starts with (default append)")
    p.add_argument("--map", action="append", default=[], metavar="NEW=OLD",
                   help="new operator NEW takes the state of the savepoint's operator OLD (OLD 'none': it starts "
                        "empty); default: the operator of the same kind and key, else of the same kind at the same id")
    p.add_argument("--add", action="append", default=[], metavar="OP:COLUMN=SQL",
                   help="new key column COLUMN of operator OP (an id, or a keyed function's name), as a SQL "
                        "expression over the old key's columns (and `value`, for an operator), e.g. "
                        "0:region=\"element_at(map('u1','eu'), user)\"")
    p.add_argument("--rename", action="append", default=[], metavar="OP:OLD=NEW",
                   help="old key column OLD of operator OP (an id, or a keyed function's name) is the new key's "
                        "column NEW")
    p.add_argument("--function-key", action="append", default=[], metavar="NAME=COLUMN,...",
                   help="keyed function NAME is keyed by these columns in the new query: its states and timers are "
                        "re-keyed (a key that loses a column needs the Python API's merge function)")
    p.add_argument("--merge", action="append", default=[], metavar="OP=RULE",
                   help="how rows of operator OP that come to share a key merge: sum, min, max or first, for every "
                        "value column, or COLUMN:RULE,... (needed when an aggregation's key loses a column)")
    p.add_argument("--dry-run", action="store_true", help="print the check and what would be done; write nothing")
    p.add_argument("--master", default="local[2]", help="the Spark master of the session (default local[2])")


def _carry_over(args):
    from ..upgrade import CarryOver, load_query_builder

    builder = load_query_builder(args.query)
    changes: dict[int, dict] = {}
    functions: dict[str, dict] = {}
    for spec in args.function_key:
        name, eq, columns = spec.partition("=")
        if not eq or not name or not columns.strip():
            raise ValueError(f"--function-key takes NAME=COLUMN,..., got {spec!r}")
        functions.setdefault(name, {})["key"] = [c.strip() for c in columns.split(",")]
    for flag, form, what, specs in (("--add", "OP:COLUMN=SQL", "add", args.add),
                                    ("--rename", "OP:OLD=NEW", "rename", args.rename)):
        for spec in specs:
            op, name, text = _op_pair(spec, flag, form)
            target = changes.setdefault(op, {}) if isinstance(op, int) else functions.setdefault(op, {})
            target.setdefault(what, {})[name] = text
    for name, change in functions.items():
        if "key" not in change:
            raise ValueError(f"--add/--rename name keyed function {name!r}: give its new key with --function-key "
                             f"{name}=COLUMN,...")
    for spec in args.merge:
        op, _, rule = spec.partition("=")
        changes.setdefault(_op_id(op, "--merge", spec), {})["merge"] = _merge_rule(rule)
    with local_spark(args.master, "spark-state carry-over") as spark:
        carry = CarryOver(spark, args.savepoint, builder, output_mode=args.output_mode,
                          storage_options=storage_options(args), progress=not args.no_progress)
        for spec in args.map:
            new, _, old = spec.partition("=")
            carry.map_operator(_op_id(new, "--map", spec),
                               None if old.strip().lower() == "none" else _op_id(old, "--map", spec))
        for op, change in sorted(changes.items()):
            carry.change_key(op, **change)
        for name, change in sorted(functions.items()):
            carry.change_function_key(name, **change)
        steps = [s.text() for s in carry.steps()]
        if args.dry_run:
            return ({"check": carry.report.to_dict(), "operators": steps, "dropped": carry.dropped()},
                    carry.summary() + "\n(dry run: nothing written)")
        result = carry.write(args.target)
    return result.to_dict(), carry.summary() + f"\nwritten: {result.savepoint} ({result.seconds} s)"


def _op_id(text: str, flag: str, spec: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{flag} {spec!r}: {text!r} is no operator id (a number)") from None


def _op_pair(spec: str, flag: str, form: str) -> tuple[Union[int, str], str, str]:
    """``OP:NAME=TEXT`` as ``(OP, NAME, TEXT)``: OP an operator id, or (not a number) a keyed function's name."""
    op, _, rest = spec.partition(":")
    name, eq, text = rest.partition("=")
    if not eq or not name or not op:
        raise ValueError(f"{flag} takes {form}, got {spec!r}")
    return (int(op) if op.strip().isdigit() else op), name.strip(), text


def _merge_rule(rule: str):
    """``sum`` or ``count:sum,total:max`` (per value column)."""
    if ":" not in rule:
        return rule
    return dict(part.split(":", 1) for part in rule.split(","))
