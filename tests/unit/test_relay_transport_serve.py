"""The relay transport's wait for a stop or a successor leaves no task pending behind it.

A waiter left pending is collected later by the garbage collector, which logs "Task was
destroyed but it is pending!" as an error at the enforcer's exit (seen on the real cluster);
the NRI session cancels its waiters, and so does the relay.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
from pathlib import Path
from typing import cast

from enforcer.app.run import RelayTransport
from enforcer.options import RunOptions
from enforcer.relay.h2 import RelayServer


class _Bound:
    """What `serve` reads of the relay server: its socket's path and inode."""

    def __init__(self, path: Path) -> None:
        self.socket_path = str(path)
        self.socket_inode = os.stat(path).st_ino


def _pending_after_serve(tmp_path: Path, *, successor: bool) -> list[str]:
    ours = tmp_path / "cri.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ours))
    transport = RelayTransport(
        RunOptions(relay_socket=str(ours), runtime_socket=str(tmp_path / "runtime.sock"))
    )
    transport.server = cast(RelayServer, _Bound(ours))
    if successor:  # a newer enforcer's socket at the path: a hand-over
        ours.unlink()
        newer = socket.socket(socket.AF_UNIX)
        newer.bind(str(ours))

    async def main() -> list[str]:
        stop = asyncio.Event()
        if not successor:
            stop.set()
        await transport.serve(stop)
        for _ in range(3):  # cancelled tasks end on the loop's next turns
            await asyncio.sleep(0)
        me = asyncio.current_task()
        return [repr(t) for t in asyncio.all_tasks() if t is not me and not t.done()]

    gc.disable()  # the collector would hide a pending task (and log it) at a moment of its own
    try:
        return asyncio.run(main())
    finally:
        gc.enable()
        transport.close()
        sock.close()
        if successor:
            newer.close()


def test_a_stop_leaves_no_waiter_pending(tmp_path: Path) -> None:
    assert _pending_after_serve(tmp_path, successor=False) == []


def test_a_hand_over_leaves_no_waiter_pending(tmp_path: Path) -> None:
    assert _pending_after_serve(tmp_path, successor=True) == []
