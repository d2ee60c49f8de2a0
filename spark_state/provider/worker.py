"""Entry point of the per-executor Python worker: ``python -m spark_state.provider.worker``.

Started by the JVM shim, never by hand. It connects to the shim's Py4J gateway on
127.0.0.1 with the token from its environment, serves :class:`StoreService` through a
callback server bound to 127.0.0.1 with the same token, and exits when its standard
input reaches EOF -- that is, when the executor JVM that started it has gone.
"""

from __future__ import annotations

import logging
import os
import sys


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("SPARK_STATE_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s spark-state-worker[%(process)d] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # py4j logs every call it receives at INFO: with loads, commits and maintenance calls that
    # is several lines per batch in a log file nobody rotates (the JVM appends our stderr to it).
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from .no_pandas import install as keep_pandas_out

    keep_pandas_out()  # before anything imports pyarrow: see no_pandas
    from py4j.java_gateway import CallbackServerParameters, GatewayParameters, JavaGateway

    from ..testing import crashpoints
    from .protocol import ENV_GATEWAY_PORT, ENV_GATEWAY_TOKEN
    from .service import StoreService

    crashpoints.set_role("provider")  # crash tests may target this kind of process

    port = int(os.environ[ENV_GATEWAY_PORT])
    token = os.environ.pop(ENV_GATEWAY_TOKEN)
    service = StoreService()
    gateway = JavaGateway(
        gateway_parameters=GatewayParameters(address="127.0.0.1", port=port, auth_token=token, auto_convert=True),
        callback_server_parameters=CallbackServerParameters(
            address="127.0.0.1", port=0, auth_token=token, daemonize=True, daemonize_connections=True
        ),
    )
    callback_port = gateway.get_callback_server().get_listening_port()
    gateway.entry_point.register(service, callback_port, os.getpid())
    logging.getLogger(__name__).info("registered with the executor JVM (gateway %d, callback %d)", port, callback_port)
    # Block until the JVM closes our stdin (it exited, or it is replacing this worker).
    while sys.stdin.buffer.read(65536):
        pass
    logging.getLogger(__name__).info("stdin closed: the executor is gone, exiting")
    gateway.shutdown(raise_exception=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
