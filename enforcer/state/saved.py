"""A saved state checked entry by entry: sound entries are kept, each damaged one is named.

`StateStore.load` checks the file as a whole (JSON, an object, the version); this checks what
is inside, so that one bad entry costs that entry, not the whole state, and every repair says
what was wrong and what was dropped. The field types come from the dataclasses the entries
are made from (the policy's `Admitted` and its `ContainerRequest`; for container entries,
whatever dataclass the caller's reader makes), so a new field is checked without a change here;
a field whose metadata names a `minimum` (a count: `enforcer.decode.request.COUNT`) is checked
against it too.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from enforcer.decode.dra_claims import CLAIM_SOURCE
from enforcer.policy import POLICIES, Admitted
from enforcer.topology import CPUSet


@dataclass
class CheckedState:
    """The sound part of a saved state, and what was wrong with the rest."""

    policy: dict[str, Any]  # what Policy.restore takes: {"policy": name, "admitted": [...]}
    containers: list[dict[str, Any]]  # the sound container entries
    damage: list[str] = field(default_factory=list)  # what was wrong, one item each
    dropped: list[str] = field(default_factory=list)  # the entries dropped because of it
    entries: int = 0  # policy and container entries found in the file

    @property
    def lost(self) -> str:
        """What was dropped, for the log: "2 of 5 entries" (`damage` names them), or "nothing"."""
        if not self.dropped:
            return "nothing"
        return f"{len(self.dropped)} of {self.entries} entries"


def check_saved(
    data: Mapping[str, Any],
    *,
    read_container: Callable[[Mapping[str, Any]], object],
    paired: bool = True,
) -> CheckedState:
    """Checks a saved state (a version-checked object, as `StateStore.load` returns it).

    `read_container` makes a container entry (a dataclass with a `key`) from its saved form,
    raising when it cannot; the fields of what it makes are checked against their types.
    `paired`: a policy entry without its container entry is damage (the enforcer could never
    release its CPUs); a read-only view (`status`) passes False and shows it all the same.
    """
    damage: list[str] = []
    policy = data.get("policy")
    if not isinstance(policy, dict):
        damage.append(f"'policy' is {_shown(policy)}, not an object")
        policy = {"admitted": []}
    elif not isinstance(name := policy.get("policy"), str) or name not in POLICIES:
        damage.append(
            f"it names the policy {_shown(name)}, which is unknown: its entries are placed "
            "by the configured policy"
        )
    admitted = _list(policy, "admitted", "'policy.admitted'", damage)
    containers = _list(data, "containers", "'containers'", damage)
    for key in ("topology", "policyConfig"):
        if not isinstance(data.get(key), dict):
            damage.append(f"{key!r} is {_shown(data.get(key))}, not an object (read anew)")
    checked = CheckedState(
        policy={**policy, "admitted": []},
        containers=[],
        damage=damage,
        entries=len(admitted) + len(containers),
    )
    keys = _check_admitted(admitted, checked)
    _check_containers(containers, keys, checked, read_container, paired)
    return checked


def _check_admitted(entries: list[Any], checked: CheckedState) -> dict[str, str]:
    """Keeps the sound policy entries; returns their keys, each with the entry's name."""
    keys: dict[str, str] = {}
    claimed: dict[int, str] = {}  # exclusive CPU -> the entry holding it
    for i, entry in enumerate(entries, 1):
        where = f"policy entry {i}"
        request = entry.get("request") if isinstance(entry, dict) else None
        if isinstance(request, dict) and all(
            isinstance(request.get(k), str) for k in ("namespace", "pod_name", "container")
        ):
            where += f" ({request['namespace']}/{request['pod_name']}/{request['container']})"
        made, wrong = _read(entry, Admitted.from_dict)
        if isinstance(made, Admitted):
            key = made.request.key
            if key in keys:
                wrong = [f"a second entry for {key} (the first is {keys[key]})"]
            elif held := sorted(c for c in made.exclusive if c in claimed):
                wrong = [f"its exclusive CPUs ({CPUSet(held)}) are held by {claimed[held[0]]}"]
        if wrong or not isinstance(made, Admitted):
            checked.damage.append(f"{where}: {', '.join(wrong)}")
            checked.dropped.append(where)
            continue
        keys[key] = where
        claimed.update(dict.fromkeys(made.exclusive, where))
        checked.policy["admitted"].append(entry)
    return keys


def _read(entry: object, reader: Callable[[Any], object]) -> tuple[object | None, list[str]]:
    """What `reader` makes of a saved entry, and what is wrong with it (empty: nothing)."""
    if not isinstance(entry, dict):
        return None, [f"it is {_shown(entry)}, not an object"]
    try:
        made = reader(entry)
    except KeyError as exc:
        return None, [f"{exc.args[0]} is missing"]
    except Exception as exc:  # the reader's own words: what it could not take
        return None, [f"cannot be read ({type(exc).__name__}: {exc})"]
    return made, _value_problems(made, "")


def _check_containers(
    entries: list[Any],
    keys: Mapping[str, str],
    checked: CheckedState,
    read_container: Callable[[Mapping[str, Any]], object],
    paired: bool,
) -> None:
    seen: dict[str, str] = {}
    for i, entry in enumerate(entries, 1):
        where = f"container entry {i}"
        key = entry.get("key") if isinstance(entry, dict) else None
        if isinstance(key, str):
            where += f" ({key})"
        _, wrong = _read(entry, read_container)
        if not wrong and isinstance(key, str):
            if key in seen:
                wrong = [f"a second entry for {key} (the first is {seen[key]})"]
            elif key not in keys:
                wrong = ["no sound policy entry has its key"]
        if wrong:
            checked.damage.append(f"{where}: {', '.join(wrong)}")
            checked.dropped.append(where)
            continue
        assert isinstance(key, str)
        seen[key] = where
        checked.containers.append(entry)
    if not paired:
        return
    # A policy entry without its container entry would hold CPUs nobody can release; a
    # prepared DRA claim's is released by unpreparing it, and has no container entry.
    # `keys` and the kept policy entries were filled together, so they pair in order; the key
    # is the request's own (with its attempt), never rebuilt from parts of the entry.
    kept = []
    for (key, where), entry in zip(keys.items(), checked.policy["admitted"], strict=True):
        if key in seen or _is_claim(entry):
            kept.append(entry)
        else:
            checked.damage.append(f"{where}: no container entry has its key")
            checked.dropped.append(where)
    checked.policy["admitted"] = kept


def _is_claim(entry: Mapping[str, Any]) -> bool:
    request = entry.get("request")
    return (
        entry.get("kind") == "held"
        and isinstance(request, dict)
        and request.get("source") == CLAIM_SOURCE
    )


def _value_problems(made: object, prefix: str) -> list[str]:
    """What is wrong with the field values of a dataclass instance, against their types
    (fields that are dataclasses themselves, such as a request's preferences, included)."""
    if not dataclasses.is_dataclass(made) or isinstance(made, type):
        return []
    hints = get_type_hints(type(made))
    wrong = []
    for f in dataclasses.fields(made):
        value, hint = getattr(made, f.name), hints[f.name]
        if not _fits(value, hint):
            wrong.append(f"{prefix}{f.name} is {_shown(value)}, not {_describe(hint)}")
        elif (least := f.metadata.get("minimum")) is not None and value < least:
            wrong.append(f"{prefix}{f.name} is {_shown(value)}, less than {least}")
        elif dataclasses.is_dataclass(value):
            wrong += _value_problems(value, f"{prefix}{f.name}.")
    return wrong


def _fits(value: object, hint: Any) -> bool:
    if hint is Any:
        return True
    origin = get_origin(hint)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in get_args(hint))
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in get_args(hint))
    if origin is not None:
        hint = origin  # dict[str, Any] -> dict
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(hint))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(hint))
    hint = origin or hint
    names = {int: "an integer", str: "a string", bool: "true or false", float: "a number"}
    if hint is type(None):
        return "null"
    if hint in names:
        return names[hint]
    if hint in (dict, Mapping) or dataclasses.is_dataclass(hint):
        return "an object"
    if hint is list:
        return "an array"
    return getattr(hint, "__name__", str(hint))


def _list(data: Mapping[str, Any], key: str, name: str, damage: list[str]) -> list[Any]:
    value = data.get(key)
    if isinstance(value, list):
        return value
    damage.append(f"{name} is {_shown(value)}, not an array")
    return []


def _shown(value: object) -> str:
    """A value for a log line: missing values named so, long ones cut short."""
    if value is None:
        return "missing or null"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
