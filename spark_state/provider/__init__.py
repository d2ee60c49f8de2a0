"""The Python half of the Spark ``StateStoreProvider``: a worker process per executor.

The JVM shim (``jvm-shim/``) starts :mod:`spark_state.provider.worker` lazily, talks to
it over Py4J on loopback with an authentication token (control), and hands it each
epoch's writes as an Arrow IPC file (data). All policy -- versions, changelogs,
snapshots, key groups, cleanup -- lives here; see :mod:`.service`.
"""
