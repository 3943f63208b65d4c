from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.topology import CPUSet

ids = st.frozensets(st.integers(min_value=0, max_value=300), max_size=60)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("\n", []),
        ("  \n", []),
        ("0", [0]),
        ("0-3", [0, 1, 2, 3]),
        ("0-3,8,10-11\n", [0, 1, 2, 3, 8, 10, 11]),
        (" 1 , 3 - 4 ", [1, 3, 4]),
        ("5,1,3", [1, 3, 5]),
        ("2-2", [2]),
        ("0-1,1-2", [0, 1, 2]),
    ],
)
def test_parse(text: str, expected: list[int]) -> None:
    assert CPUSet.parse(text).sorted() == expected


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ([], ""),
        ([0], "0"),
        ([0, 1], "0-1"),
        ([0, 1, 2, 3, 8], "0-3,8"),
        ([1, 3, 5], "1,3,5"),
        ([10, 11, 12, 20, 21, 40], "10-12,20-21,40"),
    ],
)
def test_format(cpus: list[int], text: str) -> None:
    assert str(CPUSet(cpus)) == text


@pytest.mark.parametrize(
    "text",
    ["x", "1,", ",1", "1,,2", "3-1", "1-", "-1", "1-2-3", "0x3", "1 2", "1.5", "٣", "99999999"],
)
def test_malformed_text_is_rejected_and_quoted(text: str) -> None:
    with pytest.raises(ValueError) as err:
        CPUSet.parse(text)
    assert repr(text) in str(err.value)


def test_invalid_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="-1"):
        CPUSet([-1])
    with pytest.raises(ValueError):
        CPUSet(["1"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        CPUSet([True])


@given(ids)
def test_format_parse_round_trip(cpus: frozenset[int]) -> None:
    cpuset = CPUSet(cpus)
    text = str(cpuset)
    assert CPUSet.parse(text) == cpuset
    assert CPUSet.parse(f" {text}\n") == cpuset
    # canonical: formatting the parsed set gives the same text back
    assert str(CPUSet.parse(text)) == text


@given(ids, ids)
@settings(max_examples=50)
def test_set_operations_keep_the_type(a: frozenset[int], b: frozenset[int]) -> None:
    x, y = CPUSet(a), CPUSet(b)
    results = [
        x | y,
        x & y,
        x - y,
        x ^ y,
        x | b,
        b | x,
        b & x,
        b - x,
        b ^ x,
        x.union(b, [1]),
        x.intersection(b),
        x.difference(b),
        x.symmetric_difference(b),
        x.copy(),
    ]
    assert all(type(r) is CPUSet for r in results)
    assert x | y == a | b
    assert x & y == a & b
    assert x - y == a - b
    assert b - x == b - a
    assert x ^ y == a ^ b


def test_helpers() -> None:
    cpus = CPUSet.of(5, 1, 3, 2)
    assert cpus.sorted() == [1, 2, 3, 5]
    assert list(cpus.ranges()) == [(1, 3), (5, 5)]
    assert repr(cpus) == "CPUSet('1-3,5')"
    assert cpus == {1, 2, 3, 5}
    assert hash(cpus) == hash(frozenset({1, 2, 3, 5}))
    assert pickle.loads(pickle.dumps(cpus)) == cpus
    assert type(pickle.loads(pickle.dumps(cpus))) is CPUSet
    assert not CPUSet()
    assert str(CPUSet.parse("")) == ""


def test_ids_from_outside_are_checked_in_every_operation() -> None:
    # Results made only of CPUSets' ids skip the check; anything else still gets it.
    cpus = CPUSet.of(1, 2)
    for bad in ({-1}, {7.5}, frozenset({"3"})):
        with pytest.raises(ValueError):
            cpus | bad  # type: ignore[operator]
        with pytest.raises(ValueError):
            cpus.union(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            cpus ^ bad  # type: ignore[operator]
    assert cpus & {2, -1} == CPUSet.of(2) and cpus - {1, "x"} == CPUSet.of(2)


def test_printed_texts_are_kept_within_a_bound_of_ids() -> None:
    # The shared pool changes with every admission: many distinct big sets get printed. The
    # texts kept for them must not grow with the node's history.
    from enforcer.topology import cpuset as module

    for n in range(600):
        s = CPUSet(range(n % 3, 384 + n))
        assert str(s) == f"{n % 3}-{383 + n}"
    kept = sum(len(s) for s in module._TEXTS)
    assert kept <= module._MAX_TEXT_IDS
    assert len(module._TEXTS) < 600
