"""HPACK (RFC 7541) for the relay: a full decoder and an encoder that never indexes.

Header fields are ``(name, value)`` pairs of ``bytes``: the relay re-encodes what it decodes, so
it never pays for (or risks) a text round trip.

* ``Decoder``: static and dynamic table, Huffman-coded strings, dynamic table size updates
  (bounded by the size we advertised). Errors raise ``HPACKError`` (a COMPRESSION_ERROR).
* ``Encoder``: static-table references where a field or name matches, otherwise literals,
  never added to any table and never Huffman coded. Since it keeps no state, the two sides of the
  relay have independent HPACK contexts and a header block can be built for any connection at
  any time (a refused stream never has to reach upstream to keep a table in step).
"""

from __future__ import annotations

from collections.abc import Iterable

HeaderList = list[tuple[bytes, bytes]]


class HPACKError(ValueError):
    """A header block that cannot be decoded: a COMPRESSION_ERROR for the connection."""


# RFC 7541 Appendix A.
STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = (
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
)
STATIC_LEN = len(STATIC_TABLE)  # 61

# RFC 7541 Appendix B: (code, length in bits) for symbols 0..255 and EOS (256).
HUFFMAN_CODES: tuple[tuple[int, int], ...] = (
    (0x1FF8, 13), (0x7FFFD8, 23), (0xFFFFFE2, 28), (0xFFFFFE3, 28),
    (0xFFFFFE4, 28), (0xFFFFFE5, 28), (0xFFFFFE6, 28), (0xFFFFFE7, 28),
    (0xFFFFFE8, 28), (0xFFFFEA, 24), (0x3FFFFFFC, 30), (0xFFFFFE9, 28),
    (0xFFFFFEA, 28), (0x3FFFFFFD, 30), (0xFFFFFEB, 28), (0xFFFFFEC, 28),
    (0xFFFFFED, 28), (0xFFFFFEE, 28), (0xFFFFFEF, 28), (0xFFFFFF0, 28),
    (0xFFFFFF1, 28), (0xFFFFFF2, 28), (0x3FFFFFFE, 30), (0xFFFFFF3, 28),
    (0xFFFFFF4, 28), (0xFFFFFF5, 28), (0xFFFFFF6, 28), (0xFFFFFF7, 28),
    (0xFFFFFF8, 28), (0xFFFFFF9, 28), (0xFFFFFFA, 28), (0xFFFFFFB, 28),
    (0x14, 6), (0x3F8, 10), (0x3F9, 10), (0xFFA, 12),  # ' ' ! " #
    (0x1FF9, 13), (0x15, 6), (0xF8, 8), (0x7FA, 11),  # $ % & '
    (0x3FA, 10), (0x3FB, 10), (0xF9, 8), (0x7FB, 11),  # ( ) * +
    (0xFA, 8), (0x16, 6), (0x17, 6), (0x18, 6),  # , - . /
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6),  # 0 1 2 3
    (0x1A, 6), (0x1B, 6), (0x1C, 6), (0x1D, 6),  # 4 5 6 7
    (0x1E, 6), (0x1F, 6), (0x5C, 7), (0xFB, 8),  # 8 9 : ;
    (0x7FFC, 15), (0x20, 6), (0xFFB, 12), (0x3FC, 10),  # < = > ?
    (0x1FFA, 13), (0x21, 6), (0x5D, 7), (0x5E, 7),  # @ A B C
    (0x5F, 7), (0x60, 7), (0x61, 7), (0x62, 7),  # D E F G
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7),  # H I J K
    (0x67, 7), (0x68, 7), (0x69, 7), (0x6A, 7),  # L M N O
    (0x6B, 7), (0x6C, 7), (0x6D, 7), (0x6E, 7),  # P Q R S
    (0x6F, 7), (0x70, 7), (0x71, 7), (0x72, 7),  # T U V W
    (0xFC, 8), (0x73, 7), (0xFD, 8), (0x1FFB, 13),  # X Y Z [
    (0x7FFF0, 19), (0x1FFC, 13), (0x3FFC, 14), (0x22, 6),  # \ ] ^ _
    (0x7FFD, 15), (0x3, 5), (0x23, 6), (0x4, 5),  # ` a b c
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6),  # d e f g
    (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7),  # h i j k
    (0x28, 6), (0x29, 6), (0x2A, 6), (0x7, 5),  # l m n o
    (0x2B, 6), (0x76, 7), (0x2C, 6), (0x8, 5),  # p q r s
    (0x9, 5), (0x2D, 6), (0x77, 7), (0x78, 7),  # t u v w
    (0x79, 7), (0x7A, 7), (0x7B, 7), (0x7FFE, 15),  # x y z {
    (0x7FC, 11), (0x3FFD, 14), (0x1FFD, 13), (0xFFFFFFC, 28),  # | } ~ DEL
    (0xFFFE6, 20), (0x3FFFD2, 22), (0xFFFE7, 20), (0xFFFE8, 20),  # 128
    (0x3FFFD3, 22), (0x3FFFD4, 22), (0x3FFFD5, 22), (0x7FFFD9, 23),
    (0x3FFFD6, 22), (0x7FFFDA, 23), (0x7FFFDB, 23), (0x7FFFDC, 23),
    (0x7FFFDD, 23), (0x7FFFDE, 23), (0xFFFFEB, 24), (0x7FFFDF, 23),
    (0xFFFFEC, 24), (0xFFFFED, 24), (0x3FFFD7, 22), (0x7FFFE0, 23),  # 144
    (0xFFFFEE, 24), (0x7FFFE1, 23), (0x7FFFE2, 23), (0x7FFFE3, 23),
    (0x7FFFE4, 23), (0x1FFFDC, 21), (0x3FFFD8, 22), (0x7FFFE5, 23),
    (0x3FFFD9, 22), (0x7FFFE6, 23), (0x7FFFE7, 23), (0xFFFFEF, 24),
    (0x3FFFDA, 22), (0x1FFFDD, 21), (0xFFFE9, 20), (0x3FFFDB, 22),  # 160
    (0x3FFFDC, 22), (0x7FFFE8, 23), (0x7FFFE9, 23), (0x1FFFDE, 21),
    (0x7FFFEA, 23), (0x3FFFDD, 22), (0x3FFFDE, 22), (0xFFFFF0, 24),
    (0x1FFFDF, 21), (0x3FFFDF, 22), (0x7FFFEB, 23), (0x7FFFEC, 23),
    (0x1FFFE0, 21), (0x1FFFE1, 21), (0x3FFFE0, 22), (0x1FFFE2, 21),  # 176
    (0x7FFFED, 23), (0x3FFFE1, 22), (0x7FFFEE, 23), (0x7FFFEF, 23),
    (0xFFFEA, 20), (0x3FFFE2, 22), (0x3FFFE3, 22), (0x3FFFE4, 22),
    (0x7FFFF0, 23), (0x3FFFE5, 22), (0x3FFFE6, 22), (0x7FFFF1, 23),
    (0x3FFFFE0, 26), (0x3FFFFE1, 26), (0xFFFEB, 20), (0x7FFF1, 19),  # 192
    (0x3FFFE7, 22), (0x7FFFF2, 23), (0x3FFFE8, 22), (0x1FFFFEC, 25),
    (0x3FFFFE2, 26), (0x3FFFFE3, 26), (0x3FFFFE4, 26), (0x7FFFFDE, 27),
    (0x7FFFFDF, 27), (0x3FFFFE5, 26), (0xFFFFF1, 24), (0x1FFFFED, 25),
    (0x7FFF2, 19), (0x1FFFE3, 21), (0x3FFFFE6, 26), (0x7FFFFE0, 27),  # 208
    (0x7FFFFE1, 27), (0x3FFFFE7, 26), (0x7FFFFE2, 27), (0xFFFFF2, 24),
    (0x1FFFE4, 21), (0x1FFFE5, 21), (0x3FFFFE8, 26), (0x3FFFFE9, 26),
    (0xFFFFFFD, 28), (0x7FFFFE3, 27), (0x7FFFFE4, 27), (0x7FFFFE5, 27),
    (0xFFFEC, 20), (0xFFFFF3, 24), (0xFFFED, 20), (0x1FFFE6, 21),  # 224
    (0x3FFFE9, 22), (0x1FFFE7, 21), (0x1FFFE8, 21), (0x7FFFF3, 23),
    (0x3FFFEA, 22), (0x3FFFEB, 22), (0x1FFFFEE, 25), (0x1FFFFEF, 25),
    (0xFFFFF4, 24), (0xFFFFF5, 24), (0x3FFFFEA, 26), (0x7FFFF4, 23),
    (0x3FFFFEB, 26), (0x7FFFFE6, 27), (0x3FFFFEC, 26), (0x3FFFFED, 26),  # 240
    (0x7FFFFE7, 27), (0x7FFFFE8, 27), (0x7FFFFE9, 27), (0x7FFFFEA, 27),
    (0x7FFFFEB, 27), (0xFFFFFFE, 28), (0x7FFFFEC, 27), (0x7FFFFED, 27),
    (0x7FFFFEE, 27), (0x7FFFFEF, 27), (0x7FFFFF0, 27), (0x3FFFFEE, 26),
    (0x3FFFFFFF, 30),  # EOS
)  # fmt: skip
EOS = 256

# Decoding runs a state machine over nibbles: a state is an internal node of the code tree, and
# each (state, nibble) entry packs the next state, an emitted symbol and an error bit in one int,
# so the inner loop is one list index and a couple of bit tests per nibble.
_EMIT_SHIFT = 9  # bits 0..8: next state; bits 9..17: symbol + 1 (0 = none); bit 18: error
_ERROR = 1 << 18
_huffman_table: list[int] | None = None
_huffman_accepting: list[bool] | None = None


def _build_huffman_decoder() -> tuple[list[int], list[bool]]:
    # Tree as two child arrays; children >= 0 are internal nodes, < 0 are leaves (~symbol).
    left: list[int] = [0]
    right: list[int] = [0]
    for sym, (code, length) in enumerate(HUFFMAN_CODES):
        node = 0
        for bit_pos in range(length - 1, -1, -1):
            bit = (code >> bit_pos) & 1
            children = right if bit else left
            if bit_pos == 0:
                children[node] = ~sym
            else:
                if children[node] == 0:
                    left.append(0)
                    right.append(0)
                    children[node] = len(left) - 1
                node = children[node]
    nodes = len(left)
    # A state may end a string when the bits since the last symbol are < 8 ones (the padding).
    accepting = [False] * nodes
    node, depth = 0, 0
    while depth < 8 and node >= 0:
        accepting[node] = True
        node = right[node]
        depth += 1
    table = [0] * (nodes * 16)
    for state in range(nodes):
        for nibble in range(16):
            node, emitted, error = state, 0, 0
            for bit_pos in (3, 2, 1, 0):
                nxt = (right if (nibble >> bit_pos) & 1 else left)[node]
                if nxt < 0:
                    sym = ~nxt
                    if sym == EOS:
                        error = _ERROR
                        break
                    emitted = sym + 1
                    node = 0
                else:
                    node = nxt
            table[state * 16 + nibble] = error | (emitted << _EMIT_SHIFT) | node
    return table, accepting


def huffman_decode(data: bytes) -> bytes:
    """Decode a Huffman-coded string literal; HPACKError on EOS or invalid padding."""
    global _huffman_table, _huffman_accepting
    table = _huffman_table
    if table is None:
        table, _huffman_accepting = _build_huffman_decoder()
        _huffman_table = table
    out = bytearray()
    state = 0
    for byte in data:
        entry = table[(state << 4) | (byte >> 4)]
        if entry > 0x1FF:  # emits a symbol, or hit EOS
            if entry & _ERROR:
                raise HPACKError("Huffman string contains the EOS symbol")
            out.append((entry >> _EMIT_SHIFT) - 1)
        entry = table[((entry & 0x1FF) << 4) | (byte & 0xF)]
        if entry > 0x1FF:  # emits a symbol, or hit EOS
            if entry & _ERROR:
                raise HPACKError("Huffman string contains the EOS symbol")
            out.append((entry >> _EMIT_SHIFT) - 1)
        state = entry & 0x1FF
    assert _huffman_accepting is not None
    if not _huffman_accepting[state]:
        raise HPACKError("Huffman string has invalid padding (not a prefix of EOS, or > 7 bits)")
    return bytes(out)


def huffman_encode(data: bytes) -> bytes:
    """Huffman-code a string (the relay never sends Huffman; this is for tests and tools)."""
    acc, bits = 0, 0
    for byte in data:
        code, length = HUFFMAN_CODES[byte]
        acc = (acc << length) | code
        bits += length
    pad = -bits % 8
    acc = (acc << pad) | ((1 << pad) - 1)  # pad with the EOS prefix (all ones)
    return acc.to_bytes((bits + pad) // 8, "big")


def encode_integer(value: int, prefix_bits: int, first_byte_flags: int = 0) -> bytes:
    """RFC 7541 5.1 integer with an N-bit prefix; ``first_byte_flags`` fills the high bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first_byte_flags | value,))
    out = bytearray((first_byte_flags | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_MAX_INT = 1 << 32  # no legitimate HPACK integer (index, length, table size) gets near this


def _decode_int_tail(data: bytes, pos: int, value: int) -> tuple[int, int]:
    """Continuation octets of an integer whose prefix was all ones (``value`` = the prefix)."""
    shift = 0
    n = len(data)
    while True:
        if pos >= n:
            raise HPACKError("truncated integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if value >= _MAX_INT:
            raise HPACKError("integer too large")
        if not byte & 0x80:
            return value, pos
        shift += 7


def decode_integer(data: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    """(value, next position) of the integer starting at ``data[pos]`` with an N-bit prefix."""
    if pos >= len(data):
        raise HPACKError("truncated integer")
    limit = (1 << prefix_bits) - 1
    value = data[pos] & limit
    if value < limit:
        return value, pos + 1
    return _decode_int_tail(data, pos + 1, value)


# Bounded cache of Huffman-decoded strings: peers re-send the same few values (user-agent,
# content-type, timeouts), and a dict hit is far cheaper than a bit-level decode.
_HUFFMAN_CACHE: dict[bytes, bytes] = {}
_HUFFMAN_CACHE_MAX = 4096


class Decoder:
    """Decodes header blocks of one connection direction (owns that direction's dynamic table).

    ``max_table_size`` is the SETTINGS_HEADER_TABLE_SIZE we advertised: the peer may shrink the
    table below it with size updates but never grow it above.
    """

    __slots__ = ("_entries", "_size", "max_allowed", "max_size")

    def __init__(self, max_table_size: int = 4096) -> None:
        self._entries: list[tuple[bytes, bytes]] = []  # newest first
        self._size = 0
        self.max_allowed = max_table_size
        self.max_size = max_table_size

    @property
    def table(self) -> list[tuple[bytes, bytes]]:
        """The dynamic table, newest entry first (a copy; for tests and debugging)."""
        return list(self._entries)

    @property
    def table_size(self) -> int:
        return self._size

    def set_max_allowed(self, size: int) -> None:
        """Our advertised SETTINGS_HEADER_TABLE_SIZE changed (acknowledged by the peer)."""
        self.max_allowed = size
        if self.max_size > size:
            self._resize(size)

    def _resize(self, size: int) -> None:
        self.max_size = size
        self._evict(size)

    def _evict(self, limit: int) -> None:
        entries = self._entries
        while self._size > limit and entries:
            name, value = entries.pop()
            self._size -= len(name) + len(value) + 32

    def _add(self, field: tuple[bytes, bytes]) -> None:
        size = len(field[0]) + len(field[1]) + 32
        if size > self.max_size:
            # RFC 7541 4.4: an entry larger than the table empties it and is not added.
            self._entries.clear()
            self._size = 0
            return
        self._evict(self.max_size - size)
        self._entries.insert(0, field)
        self._size += size

    def _lookup(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= STATIC_LEN:
            return STATIC_TABLE[index - 1]
        dyn = index - STATIC_LEN - 1
        if index <= 0 or dyn >= len(self._entries):
            raise HPACKError(f"header table index {index} out of range")
        return self._entries[dyn]

    def _string(self, data: bytes, pos: int) -> tuple[bytes, int]:
        if pos >= len(data):
            raise HPACKError("truncated string literal")
        huffman = data[pos] & 0x80
        length = data[pos] & 0x7F
        pos += 1
        if length == 0x7F:
            length, pos = _decode_int_tail(data, pos, length)
        end = pos + length
        if end > len(data):
            raise HPACKError("string literal runs past the end of the header block")
        raw = data[pos:end]
        if huffman:
            decoded = _HUFFMAN_CACHE.get(raw)
            if decoded is None:
                decoded = huffman_decode(raw)
                if len(_HUFFMAN_CACHE) >= _HUFFMAN_CACHE_MAX:
                    _HUFFMAN_CACHE.clear()
                _HUFFMAN_CACHE[raw] = decoded
            raw = decoded
        return raw, end

    def decode(self, data: bytes) -> HeaderList:
        """The header list of one complete header block (HEADERS + CONTINUATION payloads)."""
        out: HeaderList = []
        pos = 0
        n = len(data)
        size_update_allowed = True
        while pos < n:
            byte = data[pos]
            if byte & 0x80:  # indexed field
                index = byte & 0x7F
                if index == 0x7F:
                    index, pos = _decode_int_tail(data, pos + 1, index)
                else:
                    pos += 1
                if 0 < index <= STATIC_LEN:
                    out.append(STATIC_TABLE[index - 1])
                elif STATIC_LEN < index <= STATIC_LEN + len(self._entries):
                    out.append(self._entries[index - STATIC_LEN - 1])
                else:
                    raise HPACKError(f"header table index {index} out of range")
            elif byte & 0x40:  # literal with incremental indexing
                index = byte & 0x3F
                if index == 0x3F:
                    index, pos = _decode_int_tail(data, pos + 1, index)
                else:
                    pos += 1
                if index:
                    name = self._lookup(index)[0]
                else:
                    name, pos = self._string(data, pos)
                value, pos = self._string(data, pos)
                field = (name, value)
                self._add(field)
                out.append(field)
            elif byte & 0x20:  # dynamic table size update
                if not size_update_allowed:
                    raise HPACKError("dynamic table size update after the first header field")
                size, pos = decode_integer(data, pos, 5)
                if size > self.max_allowed:
                    raise HPACKError(
                        f"dynamic table size update to {size} exceeds the limit {self.max_allowed}"
                    )
                self._resize(size)
                continue
            else:  # literal without indexing (0000) or never indexed (0001)
                index = byte & 0x0F
                if index == 0x0F:
                    index, pos = _decode_int_tail(data, pos + 1, index)
                else:
                    pos += 1
                if index:
                    name = self._lookup(index)[0]
                else:
                    name, pos = self._string(data, pos)
                value, pos = self._string(data, pos)
                out.append((name, value))
            size_update_allowed = False
        return out


_STATIC_FIELD_INDEX: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAME_INDEX: dict[bytes, int] = {}
for _i, _field in enumerate(STATIC_TABLE, 1):
    _STATIC_FIELD_INDEX.setdefault(_field, _i)
    _STATIC_NAME_INDEX.setdefault(_field[0], _i)
# Fields with an empty value in the static table are names only: "content-type: " is rare.
for _field in [f for f in _STATIC_FIELD_INDEX if not f[1]]:
    del _STATIC_FIELD_INDEX[_field]

# The encoding of a field is context-free (nothing is ever indexed), so it can be cached.
_FIELD_CACHE: dict[tuple[bytes, bytes], bytes] = {}
_FIELD_CACHE_MAX = 8192


def _encode_string(value: bytes) -> bytes:
    return encode_integer(len(value), 7) + value


def encode_field(name: bytes, value: bytes) -> bytes:
    """One field's representation: a static index, or a never-indexed literal.

    Never-indexed (rather than merely "without indexing"): RFC 7541 7.1.3 requires an
    intermediary to keep never-indexed fields never-indexed, and since the relay does not track
    which ones were, marking every literal so is the safe superset. It costs nothing: the relay
    never indexes anything anyway.
    """
    field = (name, value)
    cached = _FIELD_CACHE.get(field)
    if cached is not None:
        return cached
    index = _STATIC_FIELD_INDEX.get(field)
    if index is not None:
        out = encode_integer(index, 7, 0x80)
    else:
        name_index = _STATIC_NAME_INDEX.get(name)
        if name_index is not None:
            out = encode_integer(name_index, 4, 0x10) + _encode_string(value)
        else:
            out = b"\x10" + _encode_string(name) + _encode_string(value)
    if len(_FIELD_CACHE) >= _FIELD_CACHE_MAX:
        _FIELD_CACHE.clear()
    _FIELD_CACHE[field] = out
    return out


class Encoder:
    """Encodes header lists for one connection direction without ever indexing.

    The only state is whether the next block must start with a dynamic table size update: after
    the peer changes SETTINGS_HEADER_TABLE_SIZE we announce a size of 0 (we use no table), which
    keeps us correct whatever limit the peer sets.
    """

    __slots__ = ("_announce_size",)

    def __init__(self) -> None:
        self._announce_size = False

    def peer_table_size_changed(self) -> None:
        self._announce_size = True

    def encode(self, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
        cache = _FIELD_CACHE
        parts = [b"\x20"] if self._announce_size else []
        self._announce_size = False
        for field in headers:
            rep = cache.get(field)
            parts.append(rep if rep is not None else encode_field(*field))
        return b"".join(parts)
