"""What the JVM shim and the Python worker agree on. Mirrors ``Protocol.scala``.

Environment of the worker process (set by the shim):
    SPARK_STATE_GATEWAY_PORT   port of the shim's Py4J gateway on 127.0.0.1
    SPARK_STATE_GATEWAY_TOKEN  the gateway's authentication token (never on the command line)

Start-up: the worker connects to the gateway, starts its Py4J callback server on
127.0.0.1 (same token), and calls ``entry_point.register(service, callbackPort, pid)``.
The JVM then calls the service's methods; each returns a JSON object as a string, with
``"error"`` and ``"message"`` set when the call failed (so the shim can fail the task
with the Python message instead of a bare Py4J error). The worker exits when its stdin
closes, i.e. when the executor JVM that owns it is gone.

Changes file (Arrow IPC *file* format, written by the shim at ``commit()``), one row per
key written (or, with TTL ``OnReadAndWrite``, read) in the epoch; the last write wins::

    op           int8    0 = put, 1 = delete, 2 = touch (an OnReadAndWrite read of a key not
                         written this epoch: rewrite the value read with a new stamp)
    key          binary  stored key (layout: keycodec in the shim, key-group prefixed)
    value        binary  new value (bare UnsafeRow, never stamped; for a touch, the value
                         read); null for deletes
    prior        int8    1 = the key existed before this epoch, 0 = it did not, -1 = unknown
    prior_stamp  int64   last-access stamp of the committed value the JVM read for this key
                         (TTL layout); -1 = unknown (not read, or an unstamped layout),
                         -2 = known absent

Change feed file (Arrow IPC *file*, written by the worker at ``changes()`` for Spark's
``statestore`` reader with ``readChangeFeed``), one row per key a version changed, in version
order, then key order::

    version      int64   the store version whose epoch made the change (batch ``version - 1``)
    op           int8    0 = put, 1 = delete
    key          binary  stored key (key-group prefixed, as in the changes file)
    value        binary  the value put (bare UnsafeRow: TTL stamps are stripped); null for deletes

Expired-keys file (Arrow IPC *file*, written by the worker at ``commit()`` with TTL; its path is
the commit reply's ``view.expiredPath``, see ``views``), the data keys TTL expiry deleted, in
record batches, at most ``views.EXPIRED_BATCHES_APPLIED`` of them (past that the reply is
``view.apply = "reload"`` and there is no file)::

    key          binary  stored key (as in the changes file)

Load and commit replies carry ``ttl``: ``stamped`` (the loaded version's values start with an
8-byte big-endian last-access stamp, which reads strip), ``enabled``, and when enabled
``ttlMs``, ``nowMs`` (processing time of this batch, taken once at load), ``returnExpired``
and ``refreshOnRead``. ``commit`` receives that ``nowMs`` back, so expiry in the JVM and
cleanup in the worker use one time per batch; its reply adds ``ttl.expired`` (rows removed
by expiry) and ``ttl.migrated`` (rows rewritten because TTL was turned on or off).
"""

from __future__ import annotations

ENV_GATEWAY_PORT = "SPARK_STATE_GATEWAY_PORT"
ENV_GATEWAY_TOKEN = "SPARK_STATE_GATEWAY_TOKEN"

#: Java interface the service implements (Py4J callback).
SERVICE_INTERFACE = "org.apache.spark.sql.execution.streaming.state.sparkstate.PythonStoreService"
