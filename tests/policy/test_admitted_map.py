"""The admitted entries keep the CPUs they hold exclusively up to date as they change: the
same answer as recounting every entry, whatever the sequence of changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy.base import AdmittedMap
from enforcer.policy.model import Admitted
from enforcer.topology import CPUSet


def _entry(key: int, cpus: frozenset[int]) -> Admitted:
    request = ContainerRequest(
        pod_uid=f"uid-{key}",
        pod_name=f"pod-{key}",
        namespace="default",
        container="c",
        qos="Guaranteed",
        cpu_request_milli=1000 * max(1, len(cpus)),
        cpu_limit_milli=1000 * max(1, len(cpus)),
        memory_request=0,
        memory_limit=0,
        preferences=Preferences(),
    )
    return Admitted(request, "exclusive" if cpus else "shared", CPUSet(cpus))


operations = st.lists(
    st.tuples(
        st.sampled_from(["set", "del", "pop", "popitem", "update", "setdefault", "clear"]),
        st.integers(0, 5),
        st.frozensets(st.integers(0, 15), max_size=4),  # overlapping on purpose (held entries)
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_taken_is_the_union_of_the_entries_exclusive_cpus(ops: list) -> None:
    entries = AdmittedMap()
    for op, key, cpus in ops:
        name = f"uid-{key}/c"
        if op == "set":
            entries[name] = _entry(key, cpus)
        elif op == "del" and name in entries:
            del entries[name]
        elif op == "pop":
            entries.pop(name, None)
        elif op == "popitem" and entries:
            entries.popitem()
        elif op == "update":
            entries.update({name: _entry(key, cpus)})
        elif op == "setdefault":
            entries.setdefault(name, _entry(key, cpus))
        elif op == "clear":
            entries.clear()
        expected = CPUSet().union(*(a.exclusive for a in entries.values()))
        assert entries.taken() == expected


def test_a_policy_given_new_entries_counts_them() -> None:
    entries = AdmittedMap({"uid-1/c": _entry(1, frozenset({1, 2}))})
    assert entries.taken() == CPUSet.of(1, 2)
    copied = AdmittedMap(entries)
    del entries["uid-1/c"]
    assert entries.taken() == CPUSet() and copied.taken() == CPUSet.of(1, 2)
