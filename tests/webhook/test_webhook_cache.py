"""The webhook's memoization is bounded in bytes, whatever the size of the pods."""

from __future__ import annotations

import subprocess

import pytest
from wh_support import BIN, container, pod

from webhook.cache import ByteLRU, SeenBefore, deep_size
from webhook.mutation import Mutator, Policy, mutate_pod


def test_the_cache_stays_within_its_bytes_and_drops_the_least_recently_used() -> None:
    cache = ByteLRU(40_000)
    for i in range(200):
        cache.get_or_compute(("key", i), lambda i=i: "v" * 1000 + str(i))
        assert cache.bytes <= 40_000
    assert 0 < len(cache) < 200
    calls = []
    cache.get_or_compute(("key", 199), lambda: calls.append(1) or "x")  # the newest: kept
    cache.get_or_compute(("key", 0), lambda: calls.append(1) or "x")  # the oldest: gone
    assert calls == [1]


def test_an_entry_larger_than_a_quarter_of_the_budget_is_not_kept() -> None:
    cache = ByteLRU(100_000)
    assert cache.get_or_compute("big", lambda: "x" * 30_000) == "x" * 30_000
    assert len(cache) == 0 and cache.bytes == 0


def test_a_wide_pod_is_charged_for_what_it_holds() -> None:
    wide = pod([container(f"c{i}", {"cpu": "1"}, {"cpu": "1"}) for i in range(2000)])
    mutator = Mutator(Policy(), cache_bytes=16 * 1024 * 1024)
    m = mutator.mutate(wide, "shop")
    assert len(mutator.cache) == 0  # seen once: not kept
    assert mutator.mutate(wide, "shop") == m
    # One entry: the key (2000 containers' names and resources) and the annotation and patch
    # (~100 KB each) are all counted.
    assert len(mutator.cache) == 1
    assert m.patch_b64 is not None and len(m.annotation) > 2000 * 50
    one = '{"name":"c0","resources":{"requests":{"cpu":"1"},"limits":{"cpu":"1"}}}'
    key_bytes = 2000 * len(one)
    assert mutator.cache.bytes > key_bytes + len(m.annotation) + len(m.patch_b64)
    assert deep_size(("a", ("b", "c"))) > deep_size("a") + deep_size("b") + deep_size("c")
    assert deep_size({"a": "b"}) > deep_size("a") + deep_size("b")


def test_denials_are_not_kept() -> None:
    from resource_contract.pod_annotation import Denial

    mutator = Mutator(Policy())
    bad = pod([container("app")], annotations={"rdtclass.resource-enforcer.dev/pod": "../x"})
    for _ in range(2):
        with pytest.raises(Denial):
            mutator.mutate(bad, "shop")
    assert len(mutator.cache) == 0


@pytest.mark.parametrize(
    ("value", "ok"),
    [("32Mi", True), ("0", True), ("1000000", True), ("-1", False), ("lots", False)],
)
def test_serve_takes_cache_bytes_as_a_quantity(value: str, ok: bool) -> None:
    out = subprocess.run(
        [str(BIN / "resource-webhook"), "serve", "--tls-cert", "/nonexistent.crt",
         "--tls-key", "/nonexistent.key", "--cache-bytes", value, "--port", "0"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    # Past the argument parser, the missing certificate stops it (exit 1); a bad size is a
    # usage error (exit 2) naming the option.
    assert out.returncode == (1 if ok else 2), out.stderr
    if not ok:
        assert "--cache-bytes" in out.stderr


def test_a_pods_entry_is_charged_what_its_key_and_value_take() -> None:
    from webhook.cache import _ENTRY_OVERHEAD

    pods = [
        pod([container("app")]),
        pod([container(f"c{i}", {"cpu": "1", "memory": 7}, {"cpu": 1.5}) for i in range(40)]),
        pod(
            [container("app", {"cpu": "250m"})],
            annotations={"rdtclass.resource-enforcer.dev/pod": "gold", "other": "x"},
        ),
    ]
    pods[2]["spec"]["initContainers"] = [container("init", {"cpu": "100m"}, {"cpu": "1"})]
    for p in pods:
        mutator = Mutator(Policy())
        mutator.mutate(p, "shop")
        mutator.mutate(p, "shop")  # kept the second time
        [(key, (value, charged))] = mutator.cache._entries.items()
        assert charged == deep_size(key) + deep_size(value) + _ENTRY_OVERHEAD
        assert mutator.cache.bytes == charged


def test_a_pod_is_kept_from_its_second_review_on() -> None:
    mutator = Mutator(Policy())
    # The seen-before table forgets a key whose slot a later key took (by design: it is a
    # hint). With 60 keys in 16 Mi slots that happens about once in 10,000 runs (the default
    # 256 Ki slots and 199 keys made this test fail for about one hash seed in 60).
    mutator.seen = SeenBefore(slots=1 << 24)
    pods = [pod([container("app", {"memory": f"{i}Mi"})]) for i in range(1, 61)]
    for p in pods:
        mutator.mutate(p, "shop")
    assert len(mutator.cache) == 0  # all different: nothing kept
    for p in pods[:30]:
        mutator.mutate(p, "shop")
    assert len(mutator.cache) == 30
    hits = mutator.cache.get
    calls = []
    mutator.cache.get = lambda key: calls.append(hits(key)) or calls[-1]  # type: ignore[method-assign]
    mutator.mutate(pods[0], "shop")
    assert calls and calls[-1] is not None  # answered from the cache


def test_a_kept_pod_is_answered_from_the_cache_after_the_table_forgot_it() -> None:
    mutator = Mutator(Policy())
    mutator.seen = SeenBefore(slots=1)  # one slot: every key takes it from the one before
    computed = []
    annotation = mutator.annotation
    mutator.annotation = lambda *a: computed.append(1) or annotation(*a)  # type: ignore[method-assign]
    a = pod([container("app", {"memory": "1Mi"})])
    b = pod([container("app", {"memory": "2Mi"})])
    for p in (a, a, b, b):  # each kept at its second review
        mutator.mutate(p, "shop")
    assert len(mutator.cache) == 2 and len(computed) == 4
    for _ in range(10):  # the table now forgets each as the other comes
        assert mutator.mutate(a, "shop") == mutate_pod(a, namespace="shop", policy=Policy())
        mutator.mutate(b, "shop")
    assert len(computed) == 4  # all twenty answered from the cache


def test_seen_before_marks_and_fades() -> None:
    seen = SeenBefore(slots=64)
    assert not seen.check_and_mark(5)
    assert seen.check_and_mark(5)
    # Another hash in the same slot: told apart by its fingerprint, and it takes the slot.
    assert not seen.check_and_mark(5 + 64)
    assert seen.check_and_mark(5 + 64)
    assert not seen.check_and_mark(5)
    for h in range(100, 116):  # a quarter of the slots marked: all cleared at the next mark
        seen.check_and_mark(h)
    assert not seen.check_and_mark(5)
    with pytest.raises(ValueError, match="power of two"):
        SeenBefore(slots=100)


def test_seen_before_rarely_mistakes_one_key_for_another() -> None:
    import random

    seen = SeenBefore()
    rng = random.Random(7)
    mistaken = sum(seen.check_and_mark(rng.getrandbits(64)) for _ in range(200_000))
    assert mistaken < 200_000 * 0.01
