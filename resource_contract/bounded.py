"""Text from outside, parsed within bounds: size, nesting and node count checked before recursion.

Python's JSON and YAML readers recurse once per level of nesting, so a few kilobytes of
brackets end in RecursionError, which no caller expects; YAML aliases can also make a small
text stand for a tree of billions of nodes. Every reader of outside text (annotations, the
configuration, `plan`'s pods, the state file and journal, sysfs and other small files) goes
through this module with the bounds of its kind (`Limits`), and gets `BoundError`, a
ValueError with a one-line reason, for anything beyond them:

- `load_json`: the size, then the depth of brackets outside strings, in one linear scan,
  before the parser sees the text.
- `load_yaml`, `load_yaml_all`: the size first; the depth and the node count while the
  composer builds the tree (an alias counts as the nodes it stands for, and an alias to a
  node that contains it is refused), so nothing deeper or bigger is ever built.
- `decode_utf8`: bytes that are not UTF-8, refused in one line with the offset.

Pure: the files themselves are read by `resource_files.reads` (without blocking, never more
than the bound).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any, NamedTuple

import yaml


class BoundError(ValueError):
    """Input beyond its kind's bounds, or not text: the message says which bound and by how much."""


class Limits(NamedTuple):
    """The bounds of one kind of input."""

    max_bytes: int
    max_depth: int
    # YAML only: nodes of the tree the text stands for, each alias counted as what it stands for.
    max_nodes: int = 0  # 0: max_bytes (no text of that size holds more nodes without aliases)

    @property
    def nodes(self) -> int:
        return self.max_nodes or self.max_bytes


def size_text(n: int) -> str:
    """A byte count as people write it: 64 KiB, 1 MiB, 300 bytes."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def check_size(length: int, limits: Limits) -> None:
    if length > limits.max_bytes:
        raise BoundError(f"larger than {size_text(limits.max_bytes)} ({length} bytes)")


# A JSON string, or an unterminated one to the end: it always matches, possessively, so the
# scan stays linear whatever the quotes and backslashes (a failing match would rescan the rest).
_STRING = re.compile(r'"(?:[^"\\]++|\\.?)*+(?:"|\Z)', re.DOTALL)
_STRING_B = re.compile(rb'"(?:[^"\\]++|\\.?)*+(?:"|\Z)', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
_BRACKET_B = re.compile(rb"[\[\]{}]")
_STEP = {"{": 1, "[": 1, "}": -1, "]": -1, b"{": 1, b"[": 1, b"}": -1, b"]": -1}


def json_depth(text: str | bytes) -> int:
    """How deep JSON objects and arrays nest in `text`, strings skipped; one linear scan."""
    if isinstance(text, bytes):
        brackets: list[Any] = _BRACKET_B.findall(_STRING_B.sub(b"", text))
    else:
        brackets = _BRACKET.findall(_STRING.sub("", text))
    return max(0, max(accumulate(map(_STEP.__getitem__, brackets)), default=0))


def check_json_bounds(text: str | bytes, limits: Limits) -> None:
    """BoundError when `text` is larger or nests deeper than `limits` allow."""
    # A character is at most 4 bytes: only a short enough text is encoded to be measured.
    if isinstance(text, str) and len(text) <= limits.max_bytes:
        check_size(len(text.encode("utf-8", "surrogatepass")), limits)
    else:
        check_size(len(text), limits)
    depth = json_depth(text)
    if depth > limits.max_depth:
        raise BoundError(f"nested {depth} levels deep, more than {limits.max_depth}")


def load_json(text: str | bytes, limits: Limits) -> Any:
    """JSON within `limits`: BoundError beyond them, ValueError when it is not JSON."""
    check_json_bounds(text, limits)
    try:
        return json.loads(text)
    except RecursionError:  # not reached within any sane max_depth; a second fence
        raise BoundError("nested too deep") from None


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader whose composer counts depth and nodes as it builds the tree."""

    def __init__(self, text: str, limits: Limits) -> None:
        super().__init__(text)
        self.limits = limits
        self.depth = 0
        self.nodes = 0
        self.weights: dict[int, int] = {}  # id(node) -> the nodes its subtree stands for
        self.path: list[str] = []  # key path of the node being composed

    def compose_document(self) -> Any:
        self.weights = {}  # ids of an earlier document's nodes may be reused
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            node = super().compose_node(parent, index)
            weight = self.weights.get(id(node))
            if weight is None:
                raise BoundError(f"an alias refers to a node that contains it ({_where(mark)})")
            self._count(weight, mark)
            return node
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        self.depth += 1
        if parent is not None:
            self.path.append(_label(index))
        if self.depth > self.limits.max_depth:
            raise BoundError(
                f"{_path_text(self.path)}: nested more than {self.limits.max_depth} levels deep "
                f"({_where(mark)})"
            )
        before = self.nodes
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
            if parent is not None:
                self.path.pop()
        self._count(1, mark)
        self.weights[id(node)] = self.nodes - before
        return node

    def _count(self, weight: int, mark: Any) -> None:
        self.nodes += weight
        if self.nodes > self.limits.nodes:
            raise BoundError(
                f"stands for more than {self.limits.nodes} values (aliases counted as what they "
                f"repeat; {_where(mark)})"
            )


def _label(index: Any) -> str:
    """A path component: a mapping's key (a scalar), a sequence's index, or `?` for a key."""
    if isinstance(index, yaml.ScalarNode):
        return str(index.value)[:40]
    return "?" if index is None else str(index)


def _path_text(path: list[str]) -> str:
    if not path:
        return "(top level)"
    if len(path) <= 8:
        return ".".join(path)
    return ".".join(path[:8]) + f"... ({len(path) - 8} levels more)"


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _check_yaml_text(text: str, limits: Limits) -> None:
    if len(text) > limits.max_bytes:
        check_size(len(text), limits)
    check_size(len(text.encode("utf-8", "surrogatepass")), limits)


def load_yaml(text: str, limits: Limits) -> Any:
    """One YAML document within `limits`: BoundError beyond them, yaml.YAMLError when it is
    not YAML (as yaml.safe_load)."""
    _check_yaml_text(text, limits)
    loader = _BoundedLoader(text, limits)
    try:
        return loader.get_single_data()
    except RecursionError:  # not reached within any sane max_depth; a second fence
        raise BoundError("nested too deep") from None
    finally:
        loader.dispose()


def load_yaml_all(text: str, limits: Limits) -> list[Any]:
    """Every YAML document within `limits` (the nodes counted over all of them)."""
    _check_yaml_text(text, limits)
    loader = _BoundedLoader(text, limits)
    try:
        documents = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            documents.append(loader.get_data())
        return documents
    except RecursionError:
        raise BoundError("nested too deep") from None
    finally:
        loader.dispose()


def decode_utf8(raw: bytes) -> str:
    """The text in `raw`; BoundError naming the first byte that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BoundError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
