"""HTTP/2 framing: the streaming reader, frame builders and payload checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.relay.h2 import frames as fr
from enforcer.relay.h2.frames import ConnectionError_, ErrorCode, FrameReader


@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 255), st.binary(max_size=3000)),
             max_size=10),
    st.lists(st.integers(1, 5000), min_size=1, max_size=50),
)  # fmt: skip
def test_reader_reassembles_frames_across_any_split(
    specs: list[tuple[int, int, bytes]], cuts: list[int]
) -> None:
    wire = b"".join(fr.frame(t, f, i * 2 + 1, p) for i, (t, f, p) in enumerate(specs))
    reader = FrameReader()
    got: list[fr.Frame] = []
    pos = 0
    for cut in cuts * (len(wire) // max(1, sum(cuts)) + 1):
        if pos >= len(wire):
            break
        got += reader.feed(wire[pos : pos + cut])
        pos += cut
    got += reader.feed(wire[pos:])
    assert got == [(t, f, i * 2 + 1, p) for i, (t, f, p) in enumerate(specs)]


def test_reader_rejects_frames_above_the_limit() -> None:
    reader = FrameReader(max_frame_size=100)
    assert reader.feed(fr.frame(fr.DATA, 0, 1, b"x" * 100))[0][3] == b"x" * 100
    with pytest.raises(ConnectionError_) as err:
        reader.feed(fr.frame_header(fr.DATA, 0, 1, 101))
    assert err.value.code == ErrorCode.FRAME_SIZE_ERROR


def test_reader_masks_the_reserved_bit() -> None:
    raw = bytearray(fr.frame(fr.DATA, 0, 5, b"x"))
    raw[5] |= 0x80
    assert FrameReader().feed(bytes(raw)) == [(fr.DATA, 0, 5, b"x")]


def test_headers_split_into_continuations() -> None:
    block = bytes(range(256)) * 100  # 25600 bytes
    wire = fr.headers_frames(3, block, 10000, end_stream=True)
    frames = FrameReader().feed(wire)
    assert [(t, f, s) for t, f, s, _ in frames] == [
        (fr.HEADERS, fr.FLAG_END_STREAM, 3),
        (fr.CONTINUATION, 0, 3),
        (fr.CONTINUATION, fr.FLAG_END_HEADERS, 3),
    ]
    assert b"".join(p for *_, p in frames) == block
    single = FrameReader().feed(fr.headers_frames(1, b"abc", 16384, end_stream=False))
    assert single == [(fr.HEADERS, fr.FLAG_END_HEADERS, 1, b"abc")]


def test_padding_and_priority_are_stripped() -> None:
    assert fr.strip_padding(fr.FLAG_PADDED, b"\x02abc\x00\x00") == b"abc"
    assert fr.strip_padding(0, b"\x02abc") == b"\x02abc"
    payload = b"\x01" + b"\x00\x00\x00\x03\x10" + b"blk" + b"\x00"
    assert fr.header_fragment(fr.FLAG_PADDED | fr.FLAG_PRIORITY, payload) == b"blk"


@pytest.mark.parametrize("payload", [b"", b"\x05abc", b"\x04abc"])
def test_bad_padding_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(ConnectionError_) as err:
        fr.strip_padding(fr.FLAG_PADDED, payload)
    assert err.value.code == ErrorCode.PROTOCOL_ERROR


def test_settings_goaway_and_u32_parsing() -> None:
    settings = fr.settings_frame({fr.Setting.INITIAL_WINDOW_SIZE: 1 << 20, 0xFE03: 1})
    ((_, flags, sid, payload),) = FrameReader().feed(settings)
    assert (flags, sid) == (0, 0)
    assert fr.parse_settings(payload) == [(4, 1 << 20), (0xFE03, 1)]
    with pytest.raises(ConnectionError_):
        fr.parse_settings(b"\x00" * 5)
    ((_, _, _, goaway),) = FrameReader().feed(fr.goaway_frame(7, ErrorCode.CANCEL, b"bye"))
    assert fr.parse_goaway(goaway) == (7, ErrorCode.CANCEL, b"bye")
    with pytest.raises(ConnectionError_):
        fr.parse_goaway(b"\x00" * 7)
    assert fr.parse_u32(b"\x00\x00\x01\x00", "x") == 256
    with pytest.raises(ConnectionError_):
        fr.parse_u32(b"\x00", "x")
