"""What a reader of state as data is asked for, as one typed object, whichever way it was asked.

A read is asked for three ways: Python (``read_keyed_state(spark, path, "count", batch=3)`` or
:class:`~.readers.state_reader.StateReader`), the data source
(``spark.read.format("spark-state").option("batchId", 3)``) and the command line
(``spark-state read PATH count --batch 3``). Each surface turns what it was given into one
:class:`ReadOptions`; the rules of what goes with what (:meth:`ReadOptions.check`) and the choice
of reader (:mod:`.readers.by_options`) are made once, as Spark keeps its ``statestore``
source's options in ``StateSourceOptions``.

:data:`SPELLINGS` is the one table of each option's name on every surface (the data source's
names are Spark's ``statestore`` names where the concept is the same). An error about an option
is an :class:`OptionError`, which names the option the way the user wrote it: the surface that
caught it respells it (:meth:`OptionError.on`) before the user sees it.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Optional

from ..options import parse_bool
from .errors import StateDataError

__all__ = ["CLI", "PYTHON", "SOURCE", "SOURCE_READ_OPTIONS", "SPELLINGS", "STORAGE_PREFIXES", "WRITE_ONLY",
           "OptionError", "ReadOptions", "Spelling", "parse_source_options", "spelled"]

#: The surfaces a read is asked through.
PYTHON, SOURCE, CLI = "python", "data source", "command line"


class Spelling(NamedTuple):
    """One option's name on each surface ("" where the surface has no such option)."""

    python: str
    source: str
    cli: str


#: ReadOptions field -> its spelling on each surface. What is read is chosen by a function in
#: Python (``read_timers``) and by an option elsewhere (``readRegisteredTimers``, ``--timers``).
SPELLINGS: dict[str, Spelling] = {
    "path": Spelling("path", "path", "PATH"),
    "state": Spelling("state", "stateVarName", "STATE"),
    "function": Spelling("function=", "functionName", "--function"),
    "batch": Spelling("batch=", "batchId", "--batch"),
    "flatten_collection_types": Spelling("flatten_collection_types=", "flattenCollectionTypes",
                                         "--flatten-collection-types"),
    "timers": Spelling("read_timers()", "readRegisteredTimers", "--timers"),
    "change_feed": Spelling("read_change_feed()", "readChangeFeed", "--start-batch"),
    "start_batch": Spelling("start_batch=", "changeStartBatchId", "--start-batch"),
    "end_batch": Spelling("end_batch=", "changeEndBatchId", "--end-batch"),
    "operator_state": Spelling("read_function_operator_state()", "operatorStateName", "--operator-state"),
    "operator_id": Spelling("operator_id=", "operatorId", "--operator-id"),
    "store_name": Spelling("store_name=", "storeName", "--store-name"),
    "process_root": Spelling("process_root=", "processRoot", "--process-root"),
    "process_locations": Spelling("process_locations=", "", "--process-location"),
    "allow_pickle": Spelling("allow_pickle=", "allowPickle", "--allow-pickle"),
    "storage_options": Spelling("storage_options=", "s3.* / retry.* / hdfs.*", "--storage-option"),
    # a write's (the data source's writer, :mod:`.write_options`; Python: SavepointTransform.write(target))
    "target": Spelling("write(target)", "targetPath", ""),
}
#: Options the data source's writer takes and its reader does not: the reader leaves Spark's
#: operators to Spark's ``statestore`` source, the writer writes their stores into a savepoint.
WRITE_ONLY = ("operator_id", "store_name", "target")
#: The options ``format("spark-state")`` reads with (ReadOptions fields).
SOURCE_READ_OPTIONS: tuple[str, ...] = tuple(
    n for n, s in SPELLINGS.items() if s.source and n != "storage_options" and n not in WRITE_ONLY)
#: Data source option prefixes passed through as storage options (Spark lower-cases a source's
#: option keys; storage options are lower case already).
STORAGE_PREFIXES = ("s3.", "retry.", "hdfs.")
#: Options of Spark's ``statestore`` source that select one of Spark's own operators.
_SPARK_OPERATOR_OPTIONS = ("operatorid", "storename", "joinside", "snapshotstartbatchid", "snapshotpartitionid")


def spelled(option: str, surface: str) -> str:
    """``option``'s name on ``surface`` (the Python name where the surface has none)."""
    names = SPELLINGS[option]
    name = {PYTHON: names.python, SOURCE: names.source, CLI: names.cli}[surface]
    return name or names.python


class OptionError(StateDataError):
    """An option's value or combination is refused. ``template`` names the option as
    ``{option}``; the message spells it for ``surface`` (Python until a surface respells it)."""

    def __init__(self, option: str, template: str, surface: str = PYTHON) -> None:
        self.option, self.template, self.surface = option, template, surface
        super().__init__(template.format(option=spelled(option, surface)))

    def on(self, surface: str) -> "OptionError":
        """The same error, naming the option as ``surface`` spells it."""
        return OptionError(self.option, self.template, surface)

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        # pickled as its arguments (an exception pickles its message alone by default)
        return OptionError, (self.option, self.template, self.surface)


def parse_source_options(options: Mapping[str, str], source: str,
                         accepted: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str]]:
    """The options of data source ``source`` (keys matched without case) as ``(given, storage)``:
    the ``accepted`` fields' raw values by field name, and the storage options.

    :raises StateDataError: an unknown option (the message lists the valid ones; an option of
        Spark's ``statestore`` source that selects one of Spark's operators is named as such)."""
    canonical = {SPELLINGS[n].source.lower(): n for n in accepted}
    given: dict[str, str] = {}
    storage: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low.startswith(STORAGE_PREFIXES):
            storage[low] = value
        elif low in canonical:
            given[canonical[low]] = value
        elif low in _SPARK_OPERATOR_OPTIONS:
            raise StateDataError(
                f"option {key!r} selects one of Spark's own operators, which format('statestore') reads (Spark "
                "4.0+; spark_state.state_data.read_spark_operator_state also reads savepoints); "
                f"format('{source}') reads keyed functions")
        else:
            names = [SPELLINGS[n].source for n in accepted]
            close = difflib.get_close_matches(low, list(canonical), n=1)
            hint = f" (did you mean {SPELLINGS[canonical[close[0]]].source!r}?)" if close else ""
            raise StateDataError(
                f"unknown option {key!r} of format('{source}'){hint}; valid options: {', '.join(names)}, and "
                f"storage options {', '.join(p + '*' for p in STORAGE_PREFIXES)}")
    return given, storage


@dataclass(frozen=True)
class ReadOptions:
    """One read of state as data: the path, what is read and how (fields named as in Python).

    Exactly one thing is read: keyed state ``state`` (with ``change_feed``, its changes from
    ``start_batch``), the timers (``timers``), operator state ``operator_state`` of a function,
    or a Spark operator's store (``operator_id``; Python and the command line only: the data
    source leaves Spark's operators to Spark's ``statestore`` source).
    """

    path: str
    state: Optional[str] = None
    function: Optional[str] = None
    batch: Optional[int] = None
    #: list and map state, a row per element or entry; None: the surface's default (data
    #: source: true, as Spark's reader; Python and command line: false, the form a transform writes)
    flatten_collection_types: Optional[bool] = None
    timers: bool = False
    change_feed: bool = False
    start_batch: Optional[int] = None
    end_batch: Optional[int] = None
    operator_state: Optional[str] = None
    operator_id: Optional[int] = None
    store_name: Optional[str] = None
    process_root: Optional[str] = None
    process_locations: Mapping[str, str] = field(default_factory=dict)
    storage_options: Mapping[str, str] = field(default_factory=dict)
    allow_pickle: bool = False
    #: the surface these options came through (errors name options its way)
    surface: str = PYTHON

    def replace(self, **changes: Any) -> "ReadOptions":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ surfaces
    @classmethod
    def from_source(cls, options: Mapping[str, str], source: str = "spark-state",
                    valid: Optional[tuple[str, ...]] = None) -> "ReadOptions":
        """The options of data source ``source`` (keys matched without case), of which ``valid``
        (default: every option the data source has) are accepted.

        :raises OptionError: an unknown option (the message lists the valid ones), a value
            that is not a boolean or a batch id."""
        given, storage = parse_source_options(options, source, valid or SOURCE_READ_OPTIONS)
        values: dict[str, Any] = {}
        for name, raw in given.items():
            if name in ("timers", "change_feed", "flatten_collection_types", "allow_pickle"):
                values[name] = _bool(name, raw)
            elif name in ("batch", "start_batch", "end_batch"):
                values[name] = _batch_id(name, raw)
            else:
                values[name] = raw
        if not values.get("path"):
            raise OptionError("path", f"format('{source}') needs the checkpoint or savepoint directory: .load(path) "
                                      "or the {option} option", SOURCE)
        return cls(storage_options=storage, surface=SOURCE, **values)

    @classmethod
    def from_cli(cls, args: Any, storage_options: Mapping[str, str],
                 process_locations: Mapping[str, str]) -> "ReadOptions":
        """The arguments of ``spark-state read`` (an argparse namespace)."""
        return cls(path=args.path, state=args.state, function=args.function, batch=args.batch,
                   flatten_collection_types=args.flatten_collection_types or None, timers=args.timers,
                   change_feed=args.start_batch is not None or args.end_batch is not None,
                   start_batch=args.start_batch, end_batch=args.end_batch,
                   operator_state=args.state if args.operator_state else None,
                   operator_id=args.operator_id, store_name=args.store_name, process_root=args.process_root,
                   process_locations=dict(process_locations), storage_options=dict(storage_options),
                   allow_pickle=args.allow_pickle, surface=CLI)

    # ------------------------------------------------------------------ rules
    def _error(self, option: str, template: str) -> OptionError:
        return OptionError(option, template, self.surface)

    def _named(self, option: str) -> str:
        return spelled(option, self.surface)

    def check(self) -> "ReadOptions":
        """These options, if they ask for one read that can be done.

        :raises OptionError: nothing or several things asked for, or an option that does not
            go with what is read (the message names the options the surface's way)."""
        keyed_state = self.state is not None and self.operator_state is None
        chosen = [n for n, on in (("state", keyed_state and not self.change_feed), ("change_feed", self.change_feed),
                                  ("timers", self.timers), ("operator_state", self.operator_state is not None),
                                  ("operator_id", self.operator_id is not None)) if on]
        if len(chosen) != 1:
            choices = " or ".join(self._named(n) for n in ("state", "timers", "operator_state", "operator_id")
                                  if n in SOURCE_READ_OPTIONS or self.surface != SOURCE)
            given = ", ".join(self._named(n) for n in chosen) or "none"
            raise self._error("state", f"a read reads one thing: give exactly one of {choices} (given: {given})")
        what = chosen[0]
        if self.store_name is not None and what != "operator_id":
            raise self._error("store_name", "{option} names a store of a Spark operator: give "
                              f"{self._named('operator_id')} too")
        if self.change_feed:
            if self.state is None:
                raise self._error("change_feed", "{option} reads the changes of a keyed state: give "
                                  f"{self._named('state')}")
            if self.batch is not None:
                raise self._error("batch", f"a change feed reads batches {self._named('start_batch')}.."
                                  f"{self._named('end_batch')}: give {self._named('end_batch')}, not {{option}}")
            if self.start_batch is None:
                raise self._error("start_batch", "a change feed needs {option} (the first batch of the feed)")
            if self.flatten_collection_types:
                raise self._error("flatten_collection_types", "a change feed's row holds the whole list or map: "
                                  "leave {option} out")
        else:
            for name in ("start_batch", "end_batch"):
                if getattr(self, name) is not None:
                    raise self._error(name, f"{{option}} goes with a change feed ({self._named('change_feed')})")
        if self.flatten_collection_types is not None and what not in ("state", "change_feed"):
            raise self._error("flatten_collection_types", "{option} applies to keyed state reads: timers and "
                              "operator state have a row per timer or element (leave the option out)")
        return self

    def flatten(self) -> bool:
        """Whether list and map state is read a row per element or entry (the surface's default
        when not given)."""
        if self.flatten_collection_types is not None:
            return self.flatten_collection_types
        return self.surface == SOURCE


def _bool(option: str, raw: str) -> bool:
    value = parse_bool(raw)
    if value is None:
        raise OptionError(option, f"option {{option}} must be true or false, got {raw!r}", SOURCE)
    return value


def _batch_id(option: str, raw: str) -> int:
    try:
        return int(str(raw).strip())
    except ValueError:
        raise OptionError(option, f"option {{option}} must be a batch id (an integer), got {raw!r}",
                          SOURCE) from None
