"""Counting the frames a peer may use to make the relay work without moving a call forward
(PING, SETTINGS, RST_STREAM): past a limit, a connection error ENHANCE_YOUR_CALM."""

from __future__ import annotations

import time

from enforcer.relay.h2.framing import ConnectionError_, ErrorCode

# Frames that cost us work (an answer, a table walk) and carry no call forward: more of one
# kind than this in a row, with no HEADERS or DATA received in between (for RST_STREAM: no call
# finished in between), within FLOOD_WINDOW seconds, and the peer gets GOAWAY ENHANCE_YOUR_CALM.
# A gRPC peer's keepalive and BDP pings come minutes apart or with data.
FLOOD_LIMITS = {"PING": 100, "SETTINGS": 100, "RST_STREAM": 200}
FLOOD_WINDOW = 10.0


class Flood:
    """A count of one kind of frame since the last progress on the connection."""

    __slots__ = ("count", "limit", "since", "what")

    def __init__(self, what: str) -> None:
        self.what = what
        self.limit = FLOOD_LIMITS[what]
        self.count = 0
        self.since = 0.0

    def hit(self) -> None:
        count = self.count = self.count + 1
        if count == 1:
            self.since = time.monotonic()
        elif count > self.limit:
            if time.monotonic() - self.since < FLOOD_WINDOW:
                raise ConnectionError_(
                    ErrorCode.ENHANCE_YOUR_CALM,
                    f"{self.what} flood: more than {self.limit} in a row",
                )
            self.count = 0
