"""The relay's thin wrappers over hyperframe and hpack: what they add must not change a byte.

The libraries are tested upstream; here: the reader's splitting and error mapping, its memo of
repeated control frames, the frame writer's reused frames, the decoder's memo and its header
list bound, and the encoder's never-indexed, memoized fields.
"""

from __future__ import annotations

import tracemalloc

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.relay.h2 import header_codec
from enforcer.relay.h2.flow import header_list_size
from enforcer.relay.h2.framing import (
    REFUSED,
    ConnectionError_,
    ErrorCode,
    FrameReader,
    FrameWriter,
    Received,
    StreamError,
)
from enforcer.relay.h2.grpc_wire import final_status, read_status
from enforcer.relay.h2.header_codec import (
    HeaderBlockError,
    HeaderDecoder,
    HeaderEncoder,
    SharedHeaders,
)
from tests.relay import h2wire as fr

names = st.sampled_from([b":path", b"content-type", b"grpc-timeout", b"x-a", b"x-b", b"te"])
fields = st.tuples(names, st.binary(min_size=0, max_size=40))
header_lists = st.lists(fields, min_size=1, max_size=8)


def frames_of(wire: bytes) -> list[tuple[int, int, bytes]]:
    return [(f[0], f[2], f[3]) for f in fr.FrameReader().feed(wire)]


@given(
    st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=6),
    st.lists(st.integers(1, 400), max_size=20),
)
def test_reader_reassembles_frames_across_any_split(payloads: list[bytes], cuts: list[int]):
    wire = b"".join(fr.data_frame(2 * i + 1, p) for i, p in enumerate(payloads))
    wire += fr.ping_frame(b"12345678") * 2  # memoized the second time
    reader = FrameReader()
    got: list[Received] = []
    pos = 0
    for cut in [*cuts, len(wire)]:
        got += reader.feed(memoryview(wire[pos : pos + cut]))
        pos += cut
        if pos >= len(wire):
            break
    got += reader.feed(wire[pos:]) if pos < len(wire) else []
    assert [f[4] for f in got[: len(payloads)]] == payloads
    assert [f[1] for f in got[: len(payloads)]] == [2 * i + 1 for i in range(len(payloads))]
    assert [f[3] for f in got[: len(payloads)]] == [len(p) for p in payloads]
    assert [f[4].opaque_data for f in got[len(payloads) :]] == [b"12345678"] * 2


def test_reader_memoizes_small_control_frames_by_their_bytes() -> None:
    reader = FrameReader()
    a, b = reader.feed(fr.window_update_frame(0, 40) * 2)
    assert a[4] is b[4] and a[4].window_increment == 40
    # A stream's WINDOW_UPDATE: the same parsed frame for another stream, its own stream id.
    c, d = reader.feed(fr.window_update_frame(1, 40) + fr.window_update_frame(3, 40))
    assert c[4] is d[4] and (c[1], d[1]) == (1, 3) and c[4] is not a[4]
    e, g = reader.feed(fr.ping_frame(b"abcdefgh") + fr.ping_frame(b"abcdefgh", ack=True))
    assert e[4] is not g[4] and "ACK" in g[2] and "ACK" not in e[2]


def test_reader_hands_out_hyperframes_reading_of_payload_frames() -> None:
    """DATA, HEADERS, CONTINUATION: flags and payload as hyperframe reads them, padding and
    priority fields removed, the padded length counted."""
    padded = fr.frame(fr.DATA, 0x8 | 0x1, 5, b"\x03abc\0\0\0")
    prio = fr.frame(fr.HEADERS, 0x20 | 0x4, 7, b"\0\0\0\x03\x10" + b"\x82")
    wire = fr.data_frame(1, b"xy", True) + padded + prio + fr.data_frame(3, b"z")
    got = FrameReader().feed(wire)
    assert [(f[0], f[1], f[2], f[3], f[4]) for f in got] == [
        (fr.DATA, 1, frozenset({"END_STREAM"}), 2, b"xy"),
        (fr.DATA, 5, frozenset({"END_STREAM", "PADDED"}), 7, b"abc"),
        (fr.HEADERS, 7, frozenset({"END_HEADERS", "PRIORITY"}), 6, b"\x82"),
        (fr.DATA, 3, frozenset(), 1, b"z"),
    ]


@pytest.mark.parametrize(
    ("wire", "error", "code"),
    [
        (fr.frame(fr.DATA, 0, 0, b"x"), ConnectionError_, ErrorCode.PROTOCOL_ERROR),
        (fr.frame(fr.PING, 0, 0, b"short"), ConnectionError_, ErrorCode.FRAME_SIZE_ERROR),
        (fr.frame(fr.SETTINGS, 0, 0, b"\x00"), ConnectionError_, ErrorCode.FRAME_SIZE_ERROR),
        (fr.frame(fr.SETTINGS, 1, 0, b"\x00" * 6), ConnectionError_, ErrorCode.FRAME_SIZE_ERROR),
        (fr.frame(fr.PRIORITY, 0, 1, b"\x00"), StreamError, ErrorCode.FRAME_SIZE_ERROR),
        (fr.frame(fr.WINDOW_UPDATE, 0, 3, b"\0\0\0\0"), StreamError, ErrorCode.PROTOCOL_ERROR),
        (fr.frame(fr.DATA, 8, 1, b"\x05ab"), ConnectionError_, ErrorCode.PROTOCOL_ERROR),
        (fr.frame_header(fr.DATA, 0, 1, 20000), ConnectionError_, ErrorCode.FRAME_SIZE_ERROR),
    ],
    ids=["data-0", "ping", "settings", "settings-ack", "priority", "wu-0", "padding", "size"],
)
def test_reader_maps_refused_frames_to_rfc_errors(wire: bytes, error: type, code: ErrorCode):
    (bad,) = FrameReader().feed(wire + fr.ping_frame(b"12345678") * (error is StreamError))[:1]
    assert bad[0] == REFUSED
    assert isinstance(bad[4], error) and bad[4].code == code


def test_reader_offers_only_plain_data_frames_as_they_came() -> None:
    """A DATA frame is offered for passing on unchanged (``raw``) only with no flag but
    END_STREAM and the reserved bit clear."""
    plain = fr.data_frame(3, b"abc", True)
    odd_flag = fr.frame(fr.DATA, 0x2, 3, b"abc")
    reserved = fr.frame_header(fr.DATA, 0, 3, 3)[:5] + (0x80000003).to_bytes(4, "big") + b"abc"
    reader = FrameReader()
    got = reader.feed(plain * 2 + odd_flag * 2 + reserved * 2)
    assert [f[4] for f in got] == [b"abc"] * 6
    # (the first plain one may have been parsed whole, to learn hyperframe's verdict)
    assert [f[5] for f in got[1:]] == [plain, None, None, None, None]


def test_reader_refuses_a_data_frame_on_stream_0_after_valid_ones() -> None:
    """The verdicts kept per frame kind tell stream 0 apart."""
    reader = FrameReader()
    assert reader.feed(fr.data_frame(1, b"a"))[0][0] == fr.DATA
    (bad,) = reader.feed(fr.frame(fr.DATA, 0, 0, b"a"))
    assert bad[0] == REFUSED and bad[4].code == ErrorCode.PROTOCOL_ERROR


def test_reader_skips_unknown_frame_types() -> None:
    (ext, ping) = FrameReader().feed(fr.frame(0xEE, 0, 0, b"xyz") + fr.ping_frame(b"12345678"))
    assert ext[0] == 0xEE and ping[4].opaque_data == b"12345678"


@given(st.binary(max_size=50_000), st.booleans(), st.integers(1, 40))
@settings(max_examples=50)
def test_writer_headers_split_into_continuations(block: bytes, end: bool, sid: int):
    writer = FrameWriter()
    wire = writer.headers(sid, block, 16384, end) + writer.data(sid, b"tail", False)
    got = frames_of(wire)
    assert got[-1] == (fr.DATA, sid, b"tail")  # the reused frames leave nothing behind
    heads = got[:-1]
    assert heads[0][0] == fr.HEADERS and all(f[0] == fr.CONTINUATION for f in heads[1:])
    assert b"".join(f[2] for f in heads) == block
    flags = [f[1] for f in fr.FrameReader().feed(wire)[:-1]]
    assert flags[-1] & fr.FLAG_END_HEADERS and not any(f & 4 for f in flags[:-1])
    assert bool(flags[0] & fr.FLAG_END_STREAM) == end


@given(st.lists(header_lists, min_size=1, max_size=12), st.integers(0, 4096))
@settings(max_examples=100)
def test_decoder_memo_agrees_with_plain_hpack(blocks: list, table_size: int) -> None:
    """Whatever the peer's encoder does with its table, the memo never returns a stale list."""
    encoder = hpack.Encoder()
    ours, plain = HeaderDecoder(), hpack.Decoder()
    for i, headers in enumerate(blocks * 2):  # each list twice: fully indexed the second time
        if i == len(blocks):
            encoder.header_table_size = table_size
        block = encoder.encode(headers)
        assert list(ours.decode(block)) == list(plain.decode(block, raw=True))


def test_decoder_stops_a_bomb_without_memory() -> None:
    encoder = hpack.Encoder()
    block = encoder.encode([(b"x-bomb", b"x" * 4000)]) + b"\xbe" * 100_000  # 400 MB decoded
    decoder = HeaderDecoder(64 << 10)
    tracemalloc.start()
    try:
        with pytest.raises(HeaderBlockError) as err:
            decoder.decode(block)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.too_large
    assert peak < 1 << 20


def test_decoder_errors_are_header_block_errors() -> None:
    with pytest.raises(HeaderBlockError) as err:
        HeaderDecoder().decode(b"\xff\xff\xff\xff\x0f")  # index far out of range
    assert not err.value.too_large


@given(header_lists)
def test_encoder_never_indexes_and_round_trips(headers: list[tuple[bytes, bytes]]) -> None:
    encoder, decoder = HeaderEncoder(), hpack.Decoder()
    for _ in range(2):  # the second time from the field memo
        block = encoder.encode(headers)
        assert list(decoder.decode(block, raw=True)) == headers
        assert decoder.header_table_size == 4096 and len(decoder.header_table.dynamic_entries) == 0


def test_encoder_memo_keeps_fields_that_repeat_not_deadlines() -> None:
    """grpc-timeout differs in nearly every call: kept, it would only push the others out."""
    HeaderEncoder().encode([(b"x-kept", b"1"), (b"grpc-timeout", b"1999871u")])
    assert (b"x-kept", b"1") in header_codec._FIELD_MEMO
    assert (b"grpc-timeout", b"1999871u") not in header_codec._FIELD_MEMO


def test_encoder_announces_a_smaller_table_after_the_peers_setting() -> None:
    encoder = HeaderEncoder()
    encoder.peer_table_size(0)
    block = encoder.encode([(b"x-a", b"1")])
    assert block[0] & 0xE0 == 0x20  # a dynamic table size update comes first
    decoder = hpack.Decoder()
    decoder.max_allowed_table_size = 0  # what the peer now allows
    assert list(decoder.decode(block, raw=True)) == [(b"x-a", b"1")]
    assert encoder.encode([(b"x-a", b"1")])[0] & 0xE0 != 0x20  # once only


def test_encoder_keeps_an_owed_update_when_the_peer_repeats_its_setting() -> None:
    encoder = HeaderEncoder()
    encoder.peer_table_size(0)
    encoder.peer_table_size(0)  # the same SETTINGS again before the next block
    assert encoder.encode([(b"x-a", b"1")])[0] & 0xE0 == 0x20


def test_shared_header_lists_keep_their_encoding_and_size() -> None:
    """A block the decoder memoizes comes back as the same list, whose encoding is made once
    and is the same as a plain list's; its size is RFC 9113's."""
    encoder = hpack.Encoder()
    headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
    decoder = HeaderDecoder()
    decoder.decode(encoder.encode(headers))  # indexes both fields
    block = encoder.encode(headers)
    first, again = decoder.decode(block), decoder.decode(block)
    assert first is again and isinstance(first, SharedHeaders)
    assert (
        first.size == header_list_size(list(first)) == sum(len(a) + len(b) + 32 for a, b in headers)
    )
    ours = HeaderEncoder()
    encoded = ours.encode(first)
    assert ours.encode(first) is encoded and encoded == HeaderEncoder().encode(list(first))
    assert hpack.Decoder().decode(encoded, raw=True) == headers


def test_shared_header_lists_keep_their_method_and_status_per_block() -> None:
    """What a memoized list keeps (its :path as the method, the status it stands for) is
    read from that list: another block gets its own, and a plain list is read every time."""
    encoder = hpack.Encoder()
    decoder = HeaderDecoder()
    ok = [(b"grpc-status", b"0"), (b"grpc-message", b"")]
    failed = [(b"grpc-status", b"5"), (b"grpc-message", b"gone")]
    request = [(b":method", b"POST"), (b":path", b"/runtime.v1.RuntimeService/Version")]
    for headers in (ok, failed, request):
        decoder.decode(encoder.encode(headers))  # indexes the fields
    shared = [decoder.decode(encoder.encode(h)) for h in (ok, failed, request)]
    assert all(isinstance(h, SharedHeaders) for h in shared)
    assert [final_status(h) for h in shared] == [0, 5, read_status(request)]
    assert [final_status(h) for h in shared] == [0, 5, read_status(request)]  # kept
    assert [h.method for h in shared] == [None, None, "/runtime.v1.RuntimeService/Version"]
    plain = [(b"grpc-status", b"7")]
    assert final_status(plain) == 7
    plain[0] = (b"grpc-status", b"9")
    assert final_status(plain) == 9


def test_decoder_memo_is_bounded_in_bytes() -> None:
    encoder = hpack.Encoder()
    decoder = HeaderDecoder()
    big = [(f"x-{i}".encode(), bytes([65 + i]) * 1000) for i in range(30)]
    encoder.header_table_size = decoder._decoder.max_allowed_table_size = 1 << 16
    decoder.decode(encoder.encode(big))
    for n in range(1, 31):  # distinct all-indexed blocks, each up to ~31 KiB of headers
        block = encoder.encode(big[:n])
        assert decoder.decode(block) == big[:n]
        assert decoder._memo_bytes <= 64 << 10


@given(
    st.integers(0, (1 << 24) - 1),
    st.sampled_from([0, 1, 2, 3, 4, 6, 7, 8, 9, 0x42]),
    st.integers(0, 255),
    st.integers(0, (1 << 32) - 1),
)
@settings(max_examples=300, deadline=None)
def test_the_frame_header_layout_reads_as_hyperframe_reads_it(
    length: int, kind: int, flags: int, sid: int
) -> None:
    from hyperframe.frame import Frame

    from enforcer.relay.h2.framing import _HEADER, _READ_HEADER

    header = length.to_bytes(3, "big") + bytes((kind, flags)) + sid.to_bytes(4, "big")
    high, low, got_kind, got_flags, got_sid = _HEADER.unpack(header)
    assert _READ_HEADER.unpack(header) == (high, low, (got_kind << 8) | got_flags, got_sid)
    try:
        frame, frame_length = Frame.parse_frame_header(memoryview(header))
    except Exception:  # a stream id the type does not allow: the layout is what is compared
        return
    assert ((high << 8) + low, got_sid & 0x7FFFFFFF) == (frame_length, frame.stream_id)
    assert (got_kind, got_flags) == (kind, flags)
    assert _HEADER.pack(high, low, got_kind, got_flags, got_sid) == header
    if kind != 0x42:
        assert frame.type == kind
