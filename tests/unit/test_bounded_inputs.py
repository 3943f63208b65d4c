"""Every parser fed from outside answers nested and oversized input with its own clear error.

Issue 28, item 2: 6 KB of brackets in an affinity annotation, a configuration, a pods file or a
state file once ended in RecursionError (a webhook 500 with a traceback, a relay INTERNAL, a
`run` that died at every start). Each parser is fed nested, aliased and oversized input here
(hypothesis), and must give its own error: AffinityError naming the annotation, ConfigError
with the key path, PlanInputError naming the file, StateError (the file set aside), a journal
record not applied; never RecursionError or any other exception.
"""

from __future__ import annotations

import os
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enforcer.commands.manifests import MANIFEST_LIMITS, PlanInputError, load_pods
from enforcer.state import journal
from enforcer.state.encoding import STATE_LIMITS, StateError, parse_state
from resource_contract.affinity import ANNOTATION_LIMITS, AffinityError, parse_affinity
from resource_contract.bounded import (
    BoundError,
    Limits,
    json_depth,
    load_json,
    load_yaml,
    load_yaml_all,
)
from resource_contract.config import CONFIG_LIMITS, ConfigError, config_data
from resource_contract.resources import ResourcesAnnotation, ResourcesAnnotationError
from resource_files.config_file import read_config_data
from resource_files.reads import NotRegularFile, read_bounded, read_value_file

KEY = "resource-enforcer.dev/affinity"
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Ways to nest one level, in JSON and YAML: flow brackets, block sequences, block mappings.
OPENERS = ["[", "{a: ", "[{b: [", "{'x': [", '{"k": ']


@st.composite
def nested_yaml(draw: st.DrawFn, min_depth: int = 40, max_depth: int = 4000) -> str:
    """A text nesting far deeper than any parser's bound, in flow or block style."""
    depth = draw(st.integers(min_depth, max_depth))
    style = draw(st.sampled_from(["flow", "dash", "mixed", "indent"]))
    if style == "flow":
        return "[" * depth + "1" + "]" * depth
    if style == "dash":
        return "- " * depth + "x"
    if style == "mixed":
        opener = draw(st.sampled_from(OPENERS))
        return "app: " + opener * depth
    depth = min(depth, 300)  # indentation grows quadratically: keep the text small
    return "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "v"


@st.composite
def alias_bomb(draw: st.DrawFn) -> str:
    """A few hundred bytes that stand for billions of values through aliases."""
    fan = draw(st.integers(8, 10))
    levels = draw(st.integers(8, 12))  # at least 8^8, some 16 million values
    lines = ["a0: &a0 [" + ",".join(["x"] * fan) + "]"]
    for i in range(1, levels):
        refs = ",".join([f"*a{i - 1}"] * fan)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def _json_nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


# -- the shared loader -----------------------------------------------------------------------


@SETTINGS
@given(nested_yaml())
def test_yaml_nesting_is_a_bound_error(text: str) -> None:
    with pytest.raises(BoundError, match="nested more than 16 levels deep"):
        load_yaml(text, Limits(1 << 20, 16))


@SETTINGS
@given(alias_bomb())
def test_aliases_count_as_the_values_they_repeat(text: str) -> None:
    assert len(text) < 2000
    with pytest.raises(BoundError, match="stands for more than 65536 values"):
        load_yaml(text, Limits(64 << 10, 16))


def test_an_alias_to_its_own_ancestor_is_refused() -> None:
    with pytest.raises(BoundError, match="refers to a node that contains it"):
        load_yaml("&a [1, *a]", Limits(1024, 16))


def test_within_bounds_yaml_reads_as_safe_load_does() -> None:
    text = "a: &x [1, 2]\nb: *x\nc: {d: [true, null, 2.5]}\n"
    assert load_yaml(text, Limits(1024, 8)) == {
        "a": [1, 2],
        "b": [1, 2],
        "c": {"d": [True, None, 2.5]},
    }
    assert load_yaml_all("a: 1\n---\nb: 2\n", Limits(1024, 8)) == [{"a": 1}, {"b": 2}]


@SETTINGS
@given(st.integers(17, 50_000), st.sampled_from([str, bytes]))
def test_json_nesting_is_refused_before_the_parser(depth: int, kind: type) -> None:
    text = _json_nested(depth)
    data = text if kind is str else text.encode()
    with pytest.raises(BoundError, match=f"nested {depth} levels deep, more than 16"):
        load_json(data, Limits(1 << 20, 16))


@SETTINGS
@given(st.text(alphabet='[]{}"\\ab', max_size=200))
def test_json_depth_never_fails_and_skips_strings(text: str) -> None:
    depth = json_depth(text)
    assert depth >= 0
    assert json_depth(text.encode()) == depth
    assert json_depth('["[[[[", {"]]": "{{"}]') == 2


def test_oversized_input_is_refused_unparsed() -> None:
    with pytest.raises(BoundError, match=r"larger than 1 KiB \(1025 bytes\)"):
        load_yaml("a" * 1025, Limits(1024, 8))
    with pytest.raises(BoundError, match="larger than 1 KiB"):
        load_json(b"1" * 1025, Limits(1024, 8))


def test_a_fifo_is_refused_at_once_never_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "online"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_value_file(fifo)
        except BaseException as exc:  # what the thread saw is checked below
            done.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)  # a generous bound: before the fix the reader blocked for ever
    assert not reader.is_alive(), "reading a FIFO blocked"
    (exc,) = done
    assert isinstance(exc, NotRegularFile) and "not a regular file (a FIFO)" in str(exc)


def test_a_file_beyond_the_bound_is_not_read_whole(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"0" * 5000)
    with pytest.raises(BoundError, match="larger than 4000 bytes"):
        read_bounded(big, 4000)
    assert read_bounded(big, 5000) == b"0" * 5000


# -- each parser fed from outside ----------------------------------------------------------


@SETTINGS
@given(nested_yaml(min_depth=17, max_depth=6000))
def test_affinity_annotation(text: str) -> None:
    if len(text.encode()) > ANNOTATION_LIMITS.max_bytes:
        match = "longer than"
    else:
        match = "nested more than 16 levels deep"
    with pytest.raises(AffinityError, match=f'annotation "{KEY}": .*{match}'):
        parse_affinity(text, KEY, 1)


@SETTINGS
@given(alias_bomb())
def test_affinity_annotation_alias_bomb(text: str) -> None:
    with pytest.raises(AffinityError, match=f'annotation "{KEY}": stands for more than'):
        parse_affinity(text, KEY, 1)


def test_the_probes_affinity_annotation() -> None:
    """The probe's value: 6 KB of brackets, well under the annotation bound."""
    text = "app: " + "[" * 3000 + "]" * 3000
    with pytest.raises(AffinityError) as err:
        parse_affinity(text, KEY, 1)
    assert str(err.value).startswith(f'annotation "{KEY}": app.0.0.0')


@SETTINGS
@given(st.integers(9, 20_000))
def test_resources_annotation(depth: int) -> None:
    with pytest.raises(ResourcesAnnotationError, match="nested"):
        ResourcesAnnotation.parse(_json_nested(depth), key="noderesource.dev/resources")


@SETTINGS
@given(nested_yaml(min_depth=33, max_depth=6000))
def test_configuration(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_data("policy:\n  " + text.replace("\n", "\n  "), "configmap/ns/cfg")
    (problem,) = err.value.problems
    assert problem.startswith("configmap/ns/cfg: policy")
    assert "nested more than 32 levels deep" in problem


@SETTINGS
@given(alias_bomb())
def test_configuration_alias_bomb(text: str) -> None:
    with pytest.raises(ConfigError, match="stands for more than"):
        config_data(text, "c.yaml")


def test_configuration_file_bounds(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * CONFIG_LIMITS.max_bytes + "\n")
    with pytest.raises(ConfigError, match=f"{big}: larger than 1 MiB"):
        read_config_data(big)
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("policy:\n  name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        read_config_data(latin)
    assert err.value.problems == [f"{latin}: not UTF-8 text (byte 0xe9 at offset 19)"]


@SETTINGS
@given(nested_yaml(min_depth=65, max_depth=6000))
def test_pods_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text("kind: Pod\nspec:\n  containers:\n    " + text.replace("\n", "\n    "))
    with pytest.raises(PlanInputError, match=f"{path}: spec.containers.*nested more than 64"):
        load_pods(str(path))


@SETTINGS
@given(alias_bomb())
def test_pods_file_alias_bomb(tmp_path: Path, text: str) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(text)
    if MANIFEST_LIMITS.max_nodes > 10**9:
        pytest.fail("the bound is no bound")
    with pytest.raises(PlanInputError, match="stands for more than"):
        load_pods(str(path))


def _checksummed(body: bytes) -> bytes:
    return body[:-1] + b',"crc32":"%08x"}' % zlib.crc32(body)


@SETTINGS
@given(st.integers(33, 100_000), st.booleans())
def test_state_file(depth: int, checksum: bool) -> None:
    body = b'{"version":%d,"x":' % (2 if checksum else 1) + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(StateError, match=f"nested {depth + 1} levels deep, more than 32"):
        parse_state(_checksummed(body) if checksum else body)


def test_state_file_too_large() -> None:
    raw = b'{"version":1,"x":"' + b"a" * STATE_LIMITS.max_bytes + b'"}'
    with pytest.raises(StateError, match="it is larger than 64 MiB"):
        parse_state(raw)


@SETTINGS
@given(st.integers(33, 50_000))
def test_journal_record(depth: int) -> None:
    sound = b'{"seq":1,"containers":{}}'
    deep = b'{"seq":2,"x":' + b"[" * depth + b"]" * depth + b"}"
    raw = b"".join(b"%08x %s\n" % (zlib.crc32(r), r) for r in (sound, deep))
    found = journal.decode(raw)
    assert [r["seq"] for r in found.records] == [1]  # the deep record is not applied
    assert found.why == f"a record nested {depth + 1} levels deep, more than 32"


def test_stored_configuration(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The cluster's last configuration, kept in the state folder: a deep one is not used
    (and logged), never RecursionError at start."""
    from enforcer.cluster.store import LAST_GOOD_FILE, LastGoodStore

    (tmp_path / LAST_GOOD_FILE).write_bytes(b'{"source":' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert LastGoodStore(tmp_path).load() is None
    assert "is unreadable (nested 5001 levels deep, more than 8); not using it" in caplog.text
