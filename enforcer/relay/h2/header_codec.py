"""HPACK for the relay, on the ``hpack`` library: a bounded decoder and a never-indexing encoder.

Header fields are ``(name, value)`` pairs of ``bytes``: the relay re-encodes what it decodes, so
it never pays for (or risks) a text round trip.

* ``HeaderDecoder``: one connection direction's ``hpack.Decoder``, with the header list size we
  announce (SETTINGS_MAX_HEADER_LIST_SIZE) as hpack's ``max_header_list_size``: hpack stops
  as soon as the decoded list (RFC 9113's measure: name + value + 32 per field) passes it, so a
  bomb (a small block that references a large table entry again and again) costs no memory. A
  block that fails is a ``HeaderBlockError``; the connection's HPACK state is gone with it.

  Memo: a block made only of one-byte indexed fields (what a peer sends once its table holds a
  call's fields: containerd's ``:status 200`` and ``grpc-status 0``, a gRPC client's request
  headers) neither reads literals nor changes the table, so its header list depends only on
  the table. Such blocks are kept (a few, short) until a block that may change the table
  arrives, which empties the memo. The list handed out for them is a ``SharedHeaders``, which
  is never changed and so keeps its own size and, once encoded, its encoding.

* ``HeaderEncoder``: hpack's ``Encoder``, every field never-indexed and not Huffman coded, so
  nothing is ever added to a table. Since the output then depends on nothing but the fields,
  a field's encoding is memoized (bounded in bytes), the two sides of the relay have
  independent HPACK contexts, and a header block can be built for any connection at any time
  (a refused stream never has to reach upstream to keep a table in step). RFC 7541 7.1.3 asks
  an intermediary to keep never-indexed fields never-indexed; marking every field so is the
  safe superset and costs nothing when nothing is indexed anyway.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

import hpack

# hpack logs every field it decodes or encodes, values included, at debug level: the relay's
# debug log (`--log-level debug`) is about calls, not header bytes.
logging.getLogger("hpack").setLevel(logging.WARNING)

HeaderList = list[tuple[bytes, bytes]]

# The header list size (RFC 9113 6.5.2: names, values and 32 bytes per field) the relay
# announces in SETTINGS_MAX_HEADER_LIST_SIZE and enforces on what it decodes. gRPC's own limit
# is 16 KiB in grpc-core and 16 MiB in grpc-go; a CRI call's headers are well under 1 KiB, its
# trailers carry at most an error message.
MAX_HEADER_LIST_SIZE = 64 << 10

_ONLY_ONE_BYTE_INDEXED = re.compile(rb"[\x80-\xfe]{1,32}")  # a block the memo may keep
_MEMO_ENTRIES = 64
# What the memo may keep per decoder, counted as twice each list's size (the list, and the
# encoding a HeaderEncoder keeps with it).
_MEMO_MAX_BYTES = 64 << 10


def request_method(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """A request's first ``:path``, as text (latin-1): the gRPC method it calls."""
    path = next((value for name, value in headers if name == b":path"), None)
    return path.decode("latin-1") if path is not None else None


class SharedHeaders(list[tuple[bytes, bytes]]):
    """A decoded header list the decoder hands out again for the same block. Never changed:
    it carries its size (RFC 9113 6.5.2) and, once a ``HeaderEncoder`` made it, its block;
    its first ``:path`` as text (latin-1, the call's method), and once read, the gRPC status
    it stands for as a response's last block (``grpc_wire.final_status``): each is read
    once per list."""

    __slots__ = ("encoded", "method", "size", "status")

    def __init__(self, headers: Iterable[tuple[bytes, bytes]]) -> None:
        super().__init__(headers)
        self.size = sum(len(name) + len(value) + 32 for name, value in self)
        self.encoded: bytes | None = None
        self.method = request_method(self)
        self.status: int | None = None


class HeaderBlockError(Exception):
    """A header block that cannot be decoded (COMPRESSION_ERROR) or decodes to more than the
    announced header list size (``too_large``): either way a connection error."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


class HeaderDecoder:
    """Decodes the header blocks of one connection direction (owns that direction's table)."""

    __slots__ = ("_decoder", "_memo", "_memo_bytes")

    def __init__(self, max_header_list_size: int = MAX_HEADER_LIST_SIZE) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=max_header_list_size)
        self._memo: dict[bytes, HeaderList] = {}
        self._memo_bytes = 0

    @property
    def max_header_list_size(self) -> int:
        return self._decoder.max_header_list_size

    def decode(self, block: bytes) -> HeaderList:
        """The header list of one complete header block (HEADERS + CONTINUATION payloads).

        The list may be shared with later calls for the same block: never change it.
        """
        memo = self._memo
        headers = memo.get(block)
        if headers is not None:
            return headers
        try:
            headers = self._decoder.decode(block, raw=True)  # type: ignore[assignment]
        except hpack.OversizedHeaderListError as exc:
            raise HeaderBlockError(
                f"header list larger than {self.max_header_list_size} bytes", too_large=True
            ) from exc
        except hpack.HPACKError as exc:
            raise HeaderBlockError(str(exc) or type(exc).__name__) from exc
        assert headers is not None
        if _ONLY_ONE_BYTE_INDEXED.fullmatch(block):
            shared = SharedHeaders(headers)
            cost = 2 * shared.size
            if cost <= _MEMO_MAX_BYTES:
                if len(memo) >= _MEMO_ENTRIES or self._memo_bytes + cost > _MEMO_MAX_BYTES:
                    memo.clear()
                    self._memo_bytes = 0
                memo[block] = shared
                self._memo_bytes += cost
                return shared
        elif memo:
            memo.clear()  # the table may have changed: what the memo holds may be stale
            self._memo_bytes = 0
        return headers


# A field's encoding is context-free (nothing is ever indexed), so it can be memoized; the memo
# is bounded in bytes (keys and values counted), and emptied when full.
_FIELD_MEMO: dict[tuple[bytes, bytes], bytes] = {}
_FIELD_MEMO_MAX_BYTES = 1 << 20
_FIELD_MEMO_MAX_FIELD = 1 << 10  # longer fields are encoded every time
_field_memo_bytes = 0


class HeaderEncoder:
    """Encodes header lists for one connection direction without ever indexing.

    Its only state is a dynamic table size update owed to the peer: when the peer changes
    SETTINGS_HEADER_TABLE_SIZE, hpack announces the new size at the start of the next block.
    """

    __slots__ = ("_announce", "_encoder")

    def __init__(self) -> None:
        self._encoder = hpack.Encoder()
        self._announce = False

    def peer_table_size(self, size: int) -> None:
        """The peer announced SETTINGS_HEADER_TABLE_SIZE ``size``."""
        # Only a change: hpack forgets an update it owes when told the same size again.
        if size != self._encoder.header_table_size:
            self._encoder.header_table_size = size
            self._announce = True

    def _field(self, name: bytes, value: bytes) -> bytes:
        global _field_memo_bytes
        encoded = self._encoder.add((name, value), sensitive=True, huffman=False)
        cost = len(name) + len(value) + len(encoded)
        # grpc-timeout is the time left, different in (nearly) every call: never memoized.
        if cost <= _FIELD_MEMO_MAX_FIELD and name != b"grpc-timeout":
            if _field_memo_bytes + cost > _FIELD_MEMO_MAX_BYTES:
                _FIELD_MEMO.clear()
                _field_memo_bytes = 0
            _FIELD_MEMO[(name, value)] = encoded
            _field_memo_bytes += cost
        return encoded

    def encode(self, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
        if self._announce:  # hpack puts the size update first; nothing is memoized here
            self._announce = False
            return self._encoder.encode(
                [(name, value, True) for name, value in headers], huffman=False
            )
        if type(headers) is SharedHeaders:  # its encoding never changes: made once
            encoded = headers.encoded
            if encoded is None:
                encoded = headers.encoded = self._encode(headers)
            return encoded
        return self._encode(headers)

    def _encode(self, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
        memo = _FIELD_MEMO
        parts = []
        for field in headers:
            encoded = memo.get(field)
            parts.append(encoded if encoded is not None else self._field(*field))
        return b"".join(parts)
