"""What state a checkpoint or savepoint holds, as rows: Spark's ``state-metadata`` for
spark-state.

::

    from spark_state.state_data import state_metadata
    for row in state_metadata("/ckpt"):            # or a savepoint's directory; no Spark needed
        print(row["kind"], row["function"], row["name"], row["state_type"], row["value_type"])
    spark.read.format("spark-state-metadata").load("/ckpt")     # the same rows (register_data_sources)

One row per keyed state, operator state and timer service of each function, and per store of
each Spark stateful operator, with the fields of :data:`~spark_state.ops.inspect.METADATA_FIELDS`:
``kind`` (``keyed_state``, ``operator_state``, ``timers``, ``spark_operator``), the function or
operator, ``name``, ``state_type`` (value, list, map, reducing, aggregating; list, union,
broadcast), ``key_columns``, ``value_type`` and ``map_key_type`` (from the state's schema
record), ``ttl_ms``, the committed batches (``min_batch_id``, ``max_batch_id``: a savepoint's
one batch), ``num_partitions``, ``backend`` and ``location``. ``spark-state inspect --json``
carries the same rows under ``metadata`` (built by :func:`spark_state.ops.inspect.metadata_rows`).

A checkpoint is described by :func:`spark_state.ops.inspect.inspect` (it loads each partition
store once, reads only). A savepoint's manifest names its operators and functions; the states'
schema records are read from the end of its state files (system keys sort last), one file at a
time.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from ...ops import savepoint_format as F
from ...ops.checkpoint_reader import provider_short_name
from ...ops.inspect import add_records, inspect, metadata_rows, record_list
from ...ops.savepoint_manifest import read_manifest
from ...ops.state_files import read_record_entries
from ...storage import open_storage
from ..location.savepoints import is_savepoint

__all__ = ["state_metadata"]


def state_metadata(path: str, *, storage_options: Optional[Mapping[str, str]] = None,
                   process_root: Optional[str] = None,
                   process_locations: Optional[Mapping[str, str]] = None) -> list[dict[str, Any]]:
    """The metadata rows of the checkpoint or savepoint at ``path`` (see the module docstring)."""
    if is_savepoint(path, storage_options):
        return metadata_rows(_savepoint(path, dict(storage_options or {})))
    return list(inspect(path, process_root=process_root, process_locations=dict(process_locations or {}),
                        storage_options=dict(storage_options or {}))["metadata"])


def _savepoint(path: str, options: dict[str, str]) -> dict[str, Any]:
    """An :func:`~spark_state.ops.inspect.inspect`-shaped description of a savepoint (the fields
    :func:`~spark_state.ops.inspect.metadata_rows` reads)."""
    storage = open_storage(path, options)
    manifest = read_manifest(storage)
    process = []
    for entry in manifest.process:
        states: dict[tuple[str, str], dict[str, Any]] = {}
        for partition in range(entry.parallelism):
            add_records(states, read_record_entries(storage, manifest, F.process_file(entry.name, partition)))
        process.append({"name": entry.name, "kind": entry.kind, "parallelism": entry.parallelism, "key": entry.key,
                        "location": f"{storage.url.rstrip('/')}/{F.PROCESS_DIR}/{entry.name}",
                        "states": record_list(states)})
    operators = [{"id": op.id, "name": op.name, "partitions": op.partitions,
                  "stores": [{"name": s.name, "location": f"{storage.url.rstrip('/')}/{F.STATE_DIR}/{op.id}",
                              "key_schema": s.key_schema, "value_schema": s.value_schema}
                             for s in op.stores]}
                 for op in manifest.operators]
    return {"checkpoint": storage.url, "first_committed_batch": manifest.batch_id,
            "last_committed_batch": manifest.batch_id, "provider": provider_short_name(manifest.provider_class),
            "operators": operators, "process_states": process}
