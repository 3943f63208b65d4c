"""HPACK: RFC 7541 Appendix C examples, the Huffman code, round trips and invalid input."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.relay.h2 import hpack
from enforcer.relay.h2.hpack import (
    HUFFMAN_CODES,
    STATIC_TABLE,
    Decoder,
    Encoder,
    HPACKError,
    decode_integer,
    encode_integer,
    huffman_decode,
    huffman_encode,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


def fields(*pairs: tuple[str, str]) -> list[tuple[bytes, bytes]]:
    return [(n.encode(), v.encode()) for n, v in pairs]


# --------------------------------------------------------------------------- C.1 integers


@pytest.mark.parametrize(
    ("value", "prefix", "encoded"),
    [(10, 5, "0a"), (1337, 5, "1f9a0a"), (42, 8, "2a")],  # C.1.1, C.1.2, C.1.3
)
def test_integer_examples(value: int, prefix: int, encoded: str) -> None:
    assert encode_integer(value, prefix) == h(encoded)
    assert decode_integer(h(encoded), 0, prefix) == (value, len(h(encoded)))


@given(st.integers(0, 1 << 30), st.integers(1, 8))
def test_integer_round_trip(value: int, prefix: int) -> None:
    data = encode_integer(value, prefix)
    assert decode_integer(data, 0, prefix) == (value, len(data))


# --------------------------------------------------------------------------- C.2 single fields


def test_c2_1_literal_with_indexing() -> None:
    d = Decoder()
    out = d.decode(h("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"))
    assert out == fields(("custom-key", "custom-header"))
    assert d.table == fields(("custom-key", "custom-header"))
    assert d.table_size == 55


def test_c2_2_literal_without_indexing() -> None:
    d = Decoder()
    assert d.decode(h("040c 2f73 616d 706c 652f 7061 7468")) == fields((":path", "/sample/path"))
    assert d.table == [] and d.table_size == 0


def test_c2_3_literal_never_indexed() -> None:
    d = Decoder()
    assert d.decode(h("1008 7061 7373 776f 7264 0673 6563 7265 74")) == fields(
        ("password", "secret")
    )
    assert d.table == []


def test_c2_4_indexed() -> None:
    d = Decoder()
    assert d.decode(h("82")) == fields((":method", "GET"))
    assert d.table == []


# --------------------------------------------------------------------------- C.3 - C.6

REQUESTS = [
    fields((":method", "GET"), (":scheme", "http"), (":path", "/"),
           (":authority", "www.example.com")),
    fields((":method", "GET"), (":scheme", "http"), (":path", "/"),
           (":authority", "www.example.com"), ("cache-control", "no-cache")),
    fields((":method", "GET"), (":scheme", "https"), (":path", "/index.html"),
           (":authority", "www.example.com"), ("custom-key", "custom-value")),
]  # fmt: skip
REQUEST_TABLES = [
    (fields((":authority", "www.example.com")), 57),
    (fields(("cache-control", "no-cache"), (":authority", "www.example.com")), 110),
    (
        fields(
            ("custom-key", "custom-value"),
            ("cache-control", "no-cache"),
            (":authority", "www.example.com"),
        ),
        164,
    ),
]
C3 = [
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
]
C4 = [
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
]

DATE1 = "Mon, 21 Oct 2013 20:13:21 GMT"
DATE2 = "Mon, 21 Oct 2013 20:13:22 GMT"
LOCATION = "https://www.example.com"
COOKIE = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
RESPONSES = [
    fields((":status", "302"), ("cache-control", "private"), ("date", DATE1),
           ("location", LOCATION)),
    fields((":status", "307"), ("cache-control", "private"), ("date", DATE1),
           ("location", LOCATION)),
    fields((":status", "200"), ("cache-control", "private"), ("date", DATE2),
           ("location", LOCATION), ("content-encoding", "gzip"), ("set-cookie", COOKIE)),
]  # fmt: skip
RESPONSE_TABLES = [
    (
        fields(("location", LOCATION), ("date", DATE1), ("cache-control", "private"),
               (":status", "302")),
        222,
    ),
    (
        fields((":status", "307"), ("location", LOCATION), ("date", DATE1),
               ("cache-control", "private")),
        222,
    ),
    (fields(("set-cookie", COOKIE), ("content-encoding", "gzip"), ("date", DATE2)), 215),
]  # fmt: skip
C5 = [
    """4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
       2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
       6c65 2e63 6f6d""",
    "4803 3330 37c1 c0bf",
    """88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
       54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
       5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
       3d31""",
]
C6 = [
    """4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
       2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3""",
    "4883 640e ffc1 c0bf",
    """88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
       77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
       9587 3160 65c0 03ed 4ee5 b106 3d50 07""",
]


@pytest.mark.parametrize("blocks", [C3, C4], ids=["C.3 plain", "C.4 Huffman"])
def test_request_examples(blocks: list[str]) -> None:
    d = Decoder()
    for block, expected, (table, size) in zip(blocks, REQUESTS, REQUEST_TABLES, strict=True):
        assert d.decode(h(block)) == expected
        assert d.table == table
        assert d.table_size == size


@pytest.mark.parametrize("blocks", [C5, C6], ids=["C.5 plain", "C.6 Huffman"])
def test_response_examples_with_evictions(blocks: list[str]) -> None:
    d = Decoder(max_table_size=256)
    for block, expected, (table, size) in zip(blocks, RESPONSES, RESPONSE_TABLES, strict=True):
        assert d.decode(h(block)) == expected
        assert d.table == table
        assert d.table_size == size


@pytest.mark.parametrize(
    ("encoded", "text"),
    [
        ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
        ("a8eb 1064 9cbf", "no-cache"),
        ("25a8 49e9 5ba9 7d7f", "custom-key"),
        ("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
        ("6402", "302"),
        ("aec3 771a 4b", "private"),
        ("d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff", DATE1),
        ("9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3", LOCATION),
        ("640e ff", "307"),
        ("9bd9 ab", "gzip"),
    ],
)
def test_huffman_strings_from_the_rfc(encoded: str, text: str) -> None:
    assert huffman_decode(h(encoded)) == text.encode()
    assert huffman_encode(text.encode()) == h(encoded)


# --------------------------------------------------------------------------- the Huffman code


def test_huffman_code_is_complete_and_canonical() -> None:
    assert len(HUFFMAN_CODES) == 257
    # Complete prefix code: the Kraft sum is exactly 1.
    assert sum(Fraction(1, 1 << length) for _, length in HUFFMAN_CODES) == 1
    # Canonical: ordered by (length, symbol), each code is the previous one plus one, shifted.
    order = sorted(range(257), key=lambda s: (HUFFMAN_CODES[s][1], s))
    code, previous = 0, HUFFMAN_CODES[order[0]][1]
    for i, sym in enumerate(order):
        length = HUFFMAN_CODES[sym][1]
        if i:
            code = (code + 1) << (length - previous)
        previous = length
        assert HUFFMAN_CODES[sym][0] == code, sym
    assert HUFFMAN_CODES[256] == (0x3FFFFFFF, 30)  # EOS


@given(st.binary(max_size=300))
def test_huffman_round_trip(data: bytes) -> None:
    assert huffman_decode(huffman_encode(data)) == data


def test_huffman_every_byte() -> None:
    data = bytes(range(256)) * 2
    assert huffman_decode(huffman_encode(data)) == data


def test_huffman_rejects_eos() -> None:
    with pytest.raises(HPACKError, match="EOS"):
        huffman_decode(b"\xff\xff\xff\xff")  # 30 one bits = EOS, then 2 bits of padding


def test_huffman_rejects_long_padding() -> None:
    # "0" is 00000 (5 bits); a whole extra byte of ones is 8+ bits of padding.
    with pytest.raises(HPACKError, match="padding"):
        huffman_decode(bytes([0b00000111, 0xFF]))


def test_huffman_rejects_padding_that_is_not_ones() -> None:
    with pytest.raises(HPACKError, match="padding"):
        huffman_decode(bytes([0b00000010]))  # "0" then padding 010


def test_huffman_empty_and_short_padding() -> None:
    assert huffman_decode(b"") == b""
    assert huffman_decode(bytes([0b00000111])) == b"0"


# --------------------------------------------------------------------------- encoder


def test_encoder_uses_static_table_and_never_indexes() -> None:
    enc = Encoder()
    block = enc.encode(
        fields((":method", "POST"), (":scheme", "http"), (":path", "/x"), ("te", "trailers"))
    )
    assert block[:2] == bytes([0x83, 0x86])  # fully static fields are indexed
    assert block[2] == 0x14  # never-indexed literal with static name :path (index 4)
    d = Decoder()
    assert d.decode(block)[2:] == fields((":path", "/x"), ("te", "trailers"))
    assert d.table == []


def test_encoder_announces_table_size_after_a_settings_change() -> None:
    enc = Encoder()
    enc.peer_table_size_changed()
    block = enc.encode(fields((":status", "200")))
    assert block == bytes([0x20, 0x88])
    assert enc.encode(fields((":status", "200"))) == bytes([0x88])
    d = Decoder()
    assert d.decode(block) == fields((":status", "200"))
    assert d.max_size == 0


header_name = st.one_of(
    st.sampled_from([n for n, _ in STATIC_TABLE]),
    st.binary(min_size=1, max_size=40),
)
header_value = st.one_of(st.sampled_from([v for _, v in STATIC_TABLE]), st.binary(max_size=300))


@given(st.lists(st.tuples(header_name, header_value), max_size=30), st.booleans())
@settings(max_examples=300)
def test_encoder_decoder_round_trip(headers: list[tuple[bytes, bytes]], announce: bool) -> None:
    enc = Encoder()
    if announce:
        enc.peer_table_size_changed()
    d = Decoder()
    assert d.decode(enc.encode(headers)) == headers
    assert d.decode(enc.encode(headers)) == headers  # stateless: the same again
    assert d.table == []


def test_field_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hpack, "_FIELD_CACHE_MAX", 10)
    hpack._FIELD_CACHE.clear()
    enc = Encoder()
    for i in range(50):
        assert Decoder().decode(enc.encode([(b"x-n", b"%d" % i)])) == [(b"x-n", b"%d" % i)]
    assert len(hpack._FIELD_CACHE) <= 10


# --------------------------------------------------------------------------- decoder errors


@pytest.mark.parametrize(
    ("block", "match"),
    [
        ("80", "index 0"),  # indexed field with index 0
        ("be", "index 62"),  # first dynamic index, table empty
        ("ff80 8080 8080 01", "too large"),  # integer overflow
        ("ff", "truncated integer"),
        ("0f", "truncated integer"),
        ("40", "truncated string"),  # literal with a literal name but no name
        ("4005 6162", "past the end"),  # name length 5, 2 bytes follow
        ("0085 ffff ffff ff00", "EOS"),  # Huffman name containing EOS
        ("8220", "size update after"),  # size update after a field
        ("3fea 1f", "exceeds"),  # size update to 4105 > 4096
    ],
)
def test_decoder_rejects_invalid_blocks(block: str, match: str) -> None:
    with pytest.raises(HPACKError, match=match):
        Decoder().decode(h(block))


def test_size_update_shrinks_and_evicts() -> None:
    d = Decoder()
    d.decode(h(C3[0]))  # one entry of 57 bytes
    assert d.table_size == 57
    assert d.decode(bytes([0x20])) == []  # size update to 0 evicts everything
    assert d.table == [] and d.max_size == 0
    with pytest.raises(HPACKError, match="index 62"):
        d.decode(h("be"))
    d.decode(encode_integer(100, 5, 0x20))
    assert d.max_size == 100


def test_entry_larger_than_table_empties_it() -> None:
    d = Decoder(max_table_size=60)
    d.decode(h(C3[0]))  # 57 bytes fit
    assert d.table_size == 57
    big = b"\x40" + encode_integer(3, 7) + b"abc" + encode_integer(40, 7) + b"v" * 40
    assert d.decode(big) == [(b"abc", b"v" * 40)]
    assert d.table == [] and d.table_size == 0


def test_set_max_allowed_evicts() -> None:
    d = Decoder()
    d.decode(h(C3[0]))
    d.set_max_allowed(10)
    assert d.table == [] and d.max_size == 10
    with pytest.raises(HPACKError, match="exceeds"):
        d.decode(encode_integer(11, 5, 0x20))
