"""What ``df.write.format("spark-state")`` is asked to write, as one typed object: the data
source's options checked on the driver before anything is written.

A write gives one state of a savepoint its whole new content and writes the result as a new
savepoint (what :class:`~.writers.transform.SavepointTransform` writes): ``path`` is the source
savepoint, ``targetPath`` the new one's directory, and exactly one state is named, a keyed
function's state (``stateVarName``, with ``functionName`` when the savepoint has several keyed
functions) or a store of a Spark operator (``operatorId``, with ``storeName``, default
``default``). Option names are those of :data:`~.read_options.SPELLINGS` (the reader's where the
concept is the same), matched without case; storage options (``s3.*``, ``retry.*``, ``hdfs.*``)
apply to both savepoints. Errors are :class:`~.read_options.OptionError`, naming the option as the
data source spells it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from .read_options import SOURCE, OptionError, parse_source_options, spelled

__all__ = ["WRITE_OPTIONS", "WriteOptions"]

#: The options of the data source's writer (fields of :class:`WriteOptions`).
WRITE_OPTIONS = ("path", "target", "state", "function", "operator_id", "store_name")


@dataclass(frozen=True)
class WriteOptions:
    """One write of the data source (see the module docstring); fields named as in Python."""

    path: str
    target: str
    state: Optional[str] = None
    function: Optional[str] = None
    operator_id: Optional[int] = None
    store_name: Optional[str] = None
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_source(cls, options: Mapping[str, str], source: str = "spark-state") -> "WriteOptions":
        """The writer's options (see the module docstring), checked.

        :raises OptionError: a missing savepoint or target, none or both of the states, an
            option that does not go with the state named, an operator id that is not a number.
        :raises StateDataError: an unknown option (the message lists the valid ones)."""
        given, storage = parse_source_options(options, source, WRITE_OPTIONS)
        if not given.get("path"):
            raise OptionError("path", f"format('{source}') writes a changed copy of a savepoint: give the savepoint "
                                      "with the {option} option", SOURCE)
        if not given.get("target"):
            raise OptionError("target", f"format('{source}') writes a new savepoint: give its directory (new or "
                                        "empty) with the {option} option", SOURCE)
        keyed, spark = given.get("state"), given.get("operator_id")
        if (keyed is None) == (spark is None):
            raise OptionError("state", "a write replaces one state: give exactly one of {option} (a keyed function's "
                                       f"state) or {spelled('operator_id', SOURCE)} (a Spark operator's store)", SOURCE)
        if keyed is not None and given.get("store_name") is not None:
            raise OptionError("store_name", f"{{option}} names a store of a Spark operator: give "
                                            f"{spelled('operator_id', SOURCE)}, not {spelled('state', SOURCE)}", SOURCE)
        if spark is not None and given.get("function") is not None:
            raise OptionError("function", f"{{option}} names a keyed function: give {spelled('state', SOURCE)}, not "
                                          f"{spelled('operator_id', SOURCE)}", SOURCE)
        operator_id = None
        if spark is not None:
            try:
                operator_id = int(spark.strip())
            except ValueError:
                raise OptionError("operator_id", f"option {{option}} must be an operator id (an integer), got "
                                                 f"{spark!r}", SOURCE) from None
        return cls(path=given["path"], target=given["target"], state=keyed, function=given.get("function"),
                   operator_id=operator_id, store_name=given.get("store_name"), storage_options=storage)
