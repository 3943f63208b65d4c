"""The one cpuset parser (resource_contract.cpusets) that the configuration schema, `plan`,
both daemons and the webhook use: what it refuses, and that it reads back what it prints."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.topology import CPUSet
from resource_contract.config import ConfigError, parse_config
from resource_contract.cpusets import MAX_CPU_ID, CpusetError, cpu_ranges, cpuset_problem

REFUSED = [
    ("3-1", "range '3-1' is reversed"),
    ("8192", "8192 is above the limit 8191"),
    ("0-65535", "65535 is above the limit 8191"),
    ("\u0663", "is not a CPU id or range"),  # ARABIC-INDIC DIGIT THREE: int() takes it
    ("\uff11", "is not a CPU id or range"),  # FULLWIDTH DIGIT ONE
    ("1,,2", "an empty element"),
    ("1,", "an empty element"),
    (",1", "an empty element"),
    ("+1", "'+1' is not a CPU id or range"),
    ("-1", "'-1' is not a CPU id or range"),
    ("1-", "'1-' is not a CPU id or range"),
    ("1 2", "'1 2' is not a CPU id or range"),
    ("1_0", "'1_0' is not a CPU id or range"),  # int() takes it
    ("\u20031", "is not a CPU id or range"),  # EM SPACE: str.strip() would take it
    ("1\x0b", "is not a CPU id or range"),
    ("0x1", "is not a CPU id or range"),
]


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_refused_everywhere_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(CpusetError, match=re.escape(why)):
        cpu_ranges(text)
    with pytest.raises(ValueError, match=re.escape(why)):
        CPUSet.parse(text)
    problem = cpuset_problem(text)
    assert problem is not None and why in problem
    for key in ("reservedCPUs", "availableCPUs"):
        with pytest.raises(ConfigError) as err:
            parse_config({"policy": {key: text}})
        (line,) = err.value.problems
        if key == "reservedCPUs" and text == "-1":  # read as a CPU quantity
            assert line == 'policy.reservedCPUs: "-1" is negative'
            continue
        assert line.startswith(f'policy.{key}: "{text}" is not a cpuset: ') and why in line


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("", []),
        ("\n", []),
        ("0-3,8\n", [0, 1, 2, 3, 8]),
        (" 1 , 3 - 4 ", [1, 3, 4]),
        ("8191", [8191]),
    ],
)
def test_accepted(text: str, ids: list[int]) -> None:
    assert sorted(CPUSet.parse(text)) == ids
    assert cpuset_problem(text) is None


@settings(max_examples=200, deadline=None)
@given(st.frozensets(st.integers(0, MAX_CPU_ID), max_size=300))
def test_what_is_printed_reads_back(ids: frozenset[int]) -> None:
    cpus = CPUSet(ids)
    assert CPUSet.parse(str(cpus)) == cpus


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789-, \t\n\u0663\u2003+x", max_size=30))
def test_any_text_is_a_set_or_a_cpuset_error(text: str) -> None:
    try:
        ranges = cpu_ranges(text)
    except CpusetError:
        return
    for r in ranges:
        assert 0 <= r.start <= r.stop - 1 <= MAX_CPU_ID
