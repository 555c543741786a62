"""Baton's Python client: the sidecar's socket API over its unix socket,
with the standard library only.

    from baton_client import Client, LockLost

    client = Client()                       # $BATON_SOCKET, or the pod's socket
    with client.hold("nightly-report", owner="exec-1", wait="1m") as lock:
        for step in steps:
            lock.check()                    # LockLost once the lock may be lost
            step(lock.fence)

With asyncio, AsyncClient's hold cancels the task running the block the
moment the lock may be lost, and the block raises LockLost. Every error of
the API is a BatonError carrying its code. docs/python.md says more.
"""
from .aio import AsyncClient, AsyncHold
from .client import Client, Hold
from .errors import BatonError, LockLost, SidecarUnreachable
from ._wire import DEFAULT_SOCKET, socket_path

__all__ = ["AsyncClient", "AsyncHold", "BatonError", "Client", "DEFAULT_SOCKET", "Hold", "LockLost",
           "SidecarUnreachable", "socket_path"]
