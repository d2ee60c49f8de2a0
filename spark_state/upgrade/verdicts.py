"""The upgrade check's verdict on each stateful operator: compatible as is, needs a migration (and
which), or incompatible -- and whether Spark starts the query at all.

Pure: what the checkpoint holds (:class:`~.held.HeldState`) and what the new query plans
(:class:`~.spark_plan.PlannedQuery`, Spark's refusals included) in, verdicts out.

Spark's start-up rules that decide ``spark_starts`` (Spark 4; the test of this module starts
each case for real and compares):

1. **Operators by id.** A restart (batch > 0) of a checkpoint with operator metadata refuses to
   start when any operator id names another operator than the metadata does, or is missing on
   one side (``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``). Ids are given top
   down (the operator nearest the sink is 0), so adding, removing or reordering stateful
   operators changes them. A checkpoint without metadata (Spark 3.5's) is not checked.
2. **Schemas.** Each operator's key schema, and its value schema, must equal the held one by
   position and type (names and nullability aside); otherwise its own error
   (``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``, ``STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE``).
   That verdict is Spark's own code's (:mod:`.spark_plan`).

Rule 1 is checked before rule 2, so the query's error is the first rule's when both fail; before
either, ``writeStream.start()`` refuses an operation streaming does not support in the output mode
(``UnsupportedOperationChecker``: the report's error, whatever the operators' verdicts), and the
first batch refuses a query with another number of sources than the offset log records (every
keyed or checkpointed function adds one, its tick source).

Keyed and checkpointed functions (``keyed_process`` and friends) are paired by name, and judged by
the rules their runtime applies when the first batch opens their state location
(:func:`spark_state.process.location.verify_location`): the same kind and max parallelism, and key
columns of the same types in the same order (names aside: a key whose same-typed columns come in
another order starts, and reads each key wrong); and each keyed state its ``open`` declares against
the schema record the savepoint holds, by the runtime's schema evolution rules
(:mod:`spark_state.state.compatibility`: as is, migrated at first open, or unreadable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pyspark.sql import types as T

from ..state.compatibility import judge as judge_state
from ..state_data.key_columns import KeyColumns
from .held import HeldFunction, HeldOperator, HeldState
from .schema_changes import describe_changes, misread, same_columns, schema_text
from .spark_plan import PlannedFunction, PlannedOperator, PlannedQuery, SparkRefusal

__all__ = ["COMPATIBLE", "INCOMPATIBLE", "MIGRATION", "FunctionVerdict", "OperatorVerdict", "UpgradeReport",
           "judge", "same_operator"]

COMPATIBLE, MIGRATION, INCOMPATIBLE = "compatible", "needs migration", "incompatible"

#: Spark's error condition of rule 1.
OPERATOR_MISMATCH = "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"
#: What Spark raises when the sources' number changed (an assertion, without an error condition).
SOURCES_CHANGED = "java.lang.AssertionError"

#: The migrations the check names.
KEY_CHANGE = "key change: take a savepoint, carry it over to the new key (spark-state carry-over), restore"
MOVED = "moved operator: its state goes to the new operator it corresponds to (spark-state carry-over)"
ADDED = "new operator: it starts empty, or is bootstrapped from history (spark-state carry-over, set_state)"
REMOVED = "removed operator: its state is dropped (spark-state carry-over)"
FUNCTION_KEY_CHANGE = ("key change: take a savepoint, carry the function's state to the new key "
                       "(carry-over --function-key), restore")
NEW_FUNCTION = ("new function: its state starts empty, and its tick source, a source the offset log does not have, "
                "joins it (spark-state carry-over)")
REMOVED_FUNCTION = ("removed function: drop its state and its tick source from a savepoint "
                    "(SavepointTransform.remove_function(name, tick_source=...))")


@dataclass(frozen=True)
class OperatorVerdict:
    """The verdict on one operator id."""

    operator_id: int
    #: the operator the checkpoint holds at this id, and the one the new query plans (None: none)
    held: Optional[str]
    planned: Optional[str]
    verdict: str
    #: what differs, in words
    reasons: tuple[str, ...] = ()
    #: the migration that carries the state over (verdict MIGRATION)
    migration: Optional[str] = None
    #: Spark's refusal of this operator at start (None: Spark accepts it)
    refusal: Optional[SparkRefusal] = None

    def to_dict(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "held": self.held, "planned": self.planned, "verdict": self.verdict,
                "reasons": list(self.reasons), "migration": self.migration,
                "spark_error": None if self.refusal is None else self.refusal.condition,
                "spark_message": None if self.refusal is None else self.refusal.message}


@dataclass(frozen=True)
class FunctionVerdict:
    """The verdict on one keyed or checkpointed function, by name."""

    name: str
    #: its kind in the checkpoint and in the new query (None: none)
    held: Optional[str]
    planned: Optional[str]
    verdict: str
    reasons: tuple[str, ...] = ()
    migration: Optional[str] = None
    #: what its first batch raises on the state as it is (None: it runs)
    error: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.name, "held": self.held, "planned": self.planned, "verdict": self.verdict,
                "reasons": list(self.reasons), "migration": self.migration, "error": self.error}


@dataclass(frozen=True)
class UpgradeReport:
    """The whole check: one verdict per operator id, and the error Spark raises at start."""

    checkpoint: str
    next_batch: int
    spark_version: str
    operators: tuple[OperatorVerdict, ...]
    #: what Spark raises when the new query starts on the checkpoint as it is (None: it starts)
    spark_error: Optional[SparkRefusal] = None
    notes: tuple[str, ...] = field(default=())
    functions: tuple[FunctionVerdict, ...] = ()

    @property
    def compatible(self) -> bool:
        """Every operator and function compatible as is: the new query may start on the checkpoint."""
        return all(v.verdict == COMPATIBLE for v in self.operators) and \
            all(f.verdict == COMPATIBLE for f in self.functions)

    @property
    def spark_starts(self) -> bool:
        return self.spark_error is None

    @property
    def exit_status(self) -> int:
        """0 when the query may restart as is; 1 when Spark refuses it or it would start wrong."""
        return 0 if self.compatible and self.spark_starts else 1

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "next_batch": self.next_batch, "spark_version": self.spark_version,
                "compatible": self.compatible, "spark_starts": self.spark_starts,
                "spark_error": None if self.spark_error is None else self.spark_error.condition,
                "spark_message": None if self.spark_error is None else self.spark_error.message,
                "operators": [v.to_dict() for v in self.operators],
                "functions": [v.to_dict() for v in self.functions], "notes": list(self.notes)}

    def summary(self) -> str:
        lines = [f"upgrade check of {self.checkpoint} (the restart runs batch {self.next_batch}, "
                 f"Spark {self.spark_version})"]
        for v in self.operators:
            held = v.held or "nothing"
            planned = v.planned or "nothing"
            lines.append(f"  operator {v.operator_id}: {held} -> {planned}: {v.verdict}")
            lines.extend(f"    - {r}" for r in v.reasons)
            if v.migration:
                lines.append(f"    migration: {v.migration}")
        for f in self.functions:
            lines.append(f"  function {f.name}: {f.held or 'nothing'} -> {f.planned or 'nothing'}: {f.verdict}")
            lines.extend(f"    - {r}" for r in f.reasons)
            if f.migration:
                lines.append(f"    migration: {f.migration}")
            if f.error:
                lines.append(f"    its first batch fails: {f.error}")
        lines.extend(f"  note: {n}" for n in self.notes)
        if self.spark_error is not None:
            lines.append(f"Spark refuses to start it: [{self.spark_error.condition}] {self.spark_error.first_line}")
        elif not self.compatible:
            lines.append("Spark starts it, but the state would be read wrong: migrate it first")
        else:
            lines.append("compatible: the new query may restart on this checkpoint")
        return "\n".join(lines)


def judge(held: HeldState, planned: PlannedQuery) -> UpgradeReport:
    """The verdicts of the rules of the module's docstring."""
    names = held.metadata_names
    checks_ids = held.next_batch != 0 and bool(names)
    mismatched = set()
    if checks_ids:
        ids = set(names) | set(planned.operators)
        mismatched = {i for i in ids if names.get(i) != (planned.operators[i].name if i in planned.operators else None)}
    verdicts = []
    for op_id in sorted(set(held.operators) | set(planned.operators)):
        old, new = held.operators.get(op_id), planned.operators.get(op_id)
        id_refusal = SparkRefusal(OPERATOR_MISMATCH, _mismatch_message(names, planned)) if op_id in mismatched else None
        verdicts.append(_verdict(op_id, old, new, held, planned, id_refusal))
    spark_error: Optional[SparkRefusal]
    held_sources, new_sources = len(held.offsets.source_lines), planned.source_count
    if planned.unsupported is not None:
        spark_error = planned.unsupported
    elif new_sources is not None and held_sources != new_sources:
        spark_error = SparkRefusal(SOURCES_CHANGED, (
            f"There are [{held_sources}] sources in the checkpoint offsets and now there are [{new_sources}] sources "
            "requested by the query. Cannot continue."))
    elif mismatched:
        spark_error = SparkRefusal(OPERATOR_MISMATCH, _mismatch_message(names, planned))
    else:
        spark_error = next((v.refusal for v in verdicts if v.refusal is not None), None)
    notes: tuple[str, ...] = ()
    if not names and held.operators:
        notes = ("the checkpoint has no operator metadata (written by Spark 3.5): Spark matches operators by id only",)
    functions = tuple(_function_verdict(name, held.functions.get(name), planned.functions.get(name))
                      for name in sorted(set(held.functions) | set(planned.functions)))
    return UpgradeReport(held.location, held.next_batch, planned.spark_version, tuple(verdicts), spark_error, notes,
                         functions)


def _function_verdict(name: str, old: Optional[HeldFunction], new: Optional[PlannedFunction]) -> FunctionVerdict:
    """The runtime's rules of the module docstring, on one function."""
    if old is None:
        assert new is not None
        return FunctionVerdict(name, None, new.kind, MIGRATION, (f"the new query adds function {name}",),
                               NEW_FUNCTION)
    if new is None:
        return FunctionVerdict(name, old.kind, None, MIGRATION,
                               (f"the new query has no function {name}: its state would not be read",),
                               REMOVED_FUNCTION)
    if old.kind != new.kind:
        return FunctionVerdict(name, old.kind, new.kind, INCOMPATIBLE, (f"a {old.kind} function is now {new.kind}",),
                               error=f"its state location holds state of a {old.kind!r} operator")
    if old.max_parallelism is not None and new.max_parallelism is not None and \
            old.max_parallelism != new.max_parallelism:
        return FunctionVerdict(name, old.kind, new.kind, INCOMPATIBLE, (
            f"max_parallelism {old.max_parallelism} -> {new.max_parallelism}: the number of key groups is fixed for "
            f"the life of the state (pass max_parallelism={old.max_parallelism})",),
            error="MaxParallelismMismatchError")
    verdict, migration, error = COMPATIBLE, None, None
    reasons: list[str] = []
    if old.key is not None and new.key is not None:
        old_key, new_key = _key_schema(old.key), _key_schema(new.key)
        reasons = describe_changes(old_key, new_key, "key")
        if reasons:
            reasons.append(f"key {schema_text(old_key)} -> {schema_text(new_key)}")
            if list(old.key["types"]) != list(new.key["types"]):
                verdict, migration = MIGRATION, FUNCTION_KEY_CHANGE
                error = "StateLocationError: its state is keyed by columns of other types"
            elif misread(old_key, new_key):
                verdict, migration = MIGRATION, FUNCTION_KEY_CHANGE
    state_reasons, state_error = _state_changes(old, new)
    reasons.extend(state_reasons)
    if state_error is not None:
        verdict, migration, error = INCOMPATIBLE, None, state_error
    if new.states_note:
        reasons.append(new.states_note)
    elif old.states is None and new.states is not None:
        reasons.append("its states are compared on a savepoint of the query (a checkpoint keeps their records in "
                       "its partition stores)")
    return FunctionVerdict(name, old.kind, new.kind, verdict, tuple(reasons), migration, error)


def _state_changes(old: HeldFunction, new: PlannedFunction) -> tuple[list[str], Optional[str]]:
    """Each keyed state's change, by the runtime's schema evolution rules
    (:func:`spark_state.state.compatibility.judge`), and the error its first batch raises for one
    it cannot read (None: none)."""
    if old.states is None or new.states is None:
        return [], None
    reasons, error = [], None
    for state, record in sorted(new.states.items()):
        held = old.states.get(state)
        if held is None:
            reasons.append(f"state `{state}` ({record.describe()}) is new: it starts empty")
            continue
        outcome = judge_state(held, record)
        if outcome.migrates:
            reasons.append(f"state `{state}`: {held.describe()} -> {record.describe()}, migrated when the function "
                           "first opens it")
        elif outcome.incompatible:
            reasons.append(f"state `{state}`: {held.describe()} -> {record.describe()} cannot be read: "
                           f"{outcome.reason}")
            error = error or f"StateSchemaIncompatibleError: state `{state}`"
    reasons.extend(f"state `{state}` ({held.describe()}) is not declared any more: its entries stay, unread"
                   for state, held in sorted(old.states.items()) if state not in new.states)
    return reasons, error


def _key_schema(key: dict) -> dict:
    """A recorded key (columns, simple types) as a StructType JSON, the form :mod:`.schema_changes` compares."""
    return T.StructType(KeyColumns(tuple(key["columns"]), tuple(key["types"])).fields).jsonValue()


def _verdict(op_id: int, old: Optional[HeldOperator], new: Optional[PlannedOperator], held: HeldState,
             planned: PlannedQuery, id_refusal: Optional[SparkRefusal]) -> OperatorVerdict:
    if old is None and new is not None:
        source = same_operator(new, held.operators.values())
        if source is not None:
            return OperatorVerdict(op_id, None, new.name, MIGRATION, (
                f"it is the checkpoint's operator {source.id} ({_described(source.name, source.schemas)}), moved to "
                f"id {op_id}",), MOVED, id_refusal)
        return OperatorVerdict(op_id, None, new.name, MIGRATION,
                               (f"the new query adds a {new.name} operator at id {op_id}",), ADDED, id_refusal)
    if new is None and old is not None:
        return OperatorVerdict(op_id, old.name, None, MIGRATION,
                               (f"the new query has no operator {op_id}: its state would not be read",), REMOVED,
                               id_refusal)
    assert old is not None and new is not None
    kind = old.name
    target = same_operator(old, [o for o in planned.operators.values() if o.id != op_id])
    if old.name != new.name or (target is not None and same_operator(new, [old]) is None):
        where = f"; it is now operator {target.id}" if target is not None else ""
        return OperatorVerdict(op_id, old.name, new.name, MIGRATION, (
            f"operator {op_id} was a {_described(old.name, old.schemas)} and is now a "
            f"{_described(new.name, new.schemas)}{where}",), MOVED, id_refusal or new.refusal)
    reasons: list[str] = []
    key_changed = wrong_order = False
    for store in sorted(set(old.schemas) | set(new.schemas)):
        prefix = "" if store == "default" else f"store {store}: "
        if store not in new.schemas or store not in old.schemas:
            reasons.append(f"{prefix}store {'removed' if store not in new.schemas else 'added'}")
            continue
        (old_key, old_value), (new_key, new_value) = old.schemas[store], new.schemas[store]
        key_text = describe_changes(old_key, new_key, "key")
        if key_text:
            key_changed = True
            wrong_order = wrong_order or bool(misread(old_key, new_key))
            reasons.extend(prefix + t for t in key_text)
            reasons.append(f"{prefix}key {schema_text(old_key)} -> {schema_text(new_key)}")
        reasons.extend(prefix + t for t in describe_changes(old_value, new_value, "value"))
    refusal = id_refusal or new.refusal
    if refusal is None and not wrong_order:
        return OperatorVerdict(op_id, kind, new.name, COMPATIBLE, tuple(reasons), None, None)
    if key_changed:
        return OperatorVerdict(op_id, kind, new.name, MIGRATION, tuple(reasons), KEY_CHANGE, refusal)
    if refusal is not None and refusal.condition == OPERATOR_MISMATCH:
        return OperatorVerdict(op_id, kind, new.name, MIGRATION, tuple(reasons), MOVED, refusal)
    if not reasons and refusal is not None:
        reasons.append(refusal.first_line)
    return OperatorVerdict(op_id, kind, new.name, INCOMPATIBLE, tuple(reasons), None, refusal)


def same_operator(op: Any, candidates: Any) -> Optional[Any]:
    """The first candidate of the same kind with the same key columns (names and types) in every
    store as ``op``: the same operator at another id (the check's "moved", the carry-over's
    proposal)."""
    for other in candidates:
        if other.name == op.name and set(other.schemas) == set(op.schemas) and all(
                same_columns(op.schemas[s][0], other.schemas[s][0]) for s in op.schemas):
            return other
    return None


def _described(name: str, schemas: Any) -> str:
    """``dedupe on (user string)``: an operator by kind and its default store's key."""
    key = schemas.get("default", (None,))[0]
    return f"{name} on {schema_text(key)}" if key is not None else name


def _mismatch_message(names: dict[int, str], planned: PlannedQuery) -> str:
    new = {i: o.name for i, o in planned.operators.items()}
    return (f"the checkpoint's operators {dict(sorted(names.items()))} differ from the new query's "
            f"{dict(sorted(new.items()))}: Spark numbers stateful operators from the sink up, so adding, removing "
            "or reordering one renumbers the others")
