"""The container registry: the one truth about every container the enforcer knows.

An entry's request and decision live in the policy (its allocation book, which only the
registry changes); everything else about the container (phase, runtime id, what was applied
and verified, why it is not where it should be) in its `Entry`. The registry alone writes the
state file, and a change counts only once written: `change()` journals what it touches and,
when the write fails, puts every touched entry and decision back as it was and raises
`StateWriteFailed`, naming the file and the OS error.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from enforcer.decode import ContainerRequest
from enforcer.engine import claimed
from enforcer.engine.model import Entry, Phase
from enforcer.policy import Admitted, Placement, PlacementError, Policy
from enforcer.refusal import Reason, Refusal
from enforcer.state import StateStore
from enforcer.topology import CPUSet

log = logging.getLogger(__name__)


class StateWriteFailed(Refusal):
    """The state file could not be written: the change was rolled back."""

    def __init__(self, message: str) -> None:
        super().__init__(Reason.UNAVAILABLE, message)


@dataclass
class _Journal:
    entries: dict[str, Entry | None]
    decisions: dict[str, Admitted | None]


@dataclass(frozen=True)
class ContainerView:
    """One row of `status`."""

    key: str
    namespace: str
    pod: str
    container: str
    container_id: str | None
    qos: str
    kind: str
    pool: str
    cpus: str | None
    mems: str | None
    exclusive: str
    rdt_class: str | None
    blockio_class: str | None
    phase: str = ""
    problem: str | None = None
    cpu_class: str | None = None  # the CPU class its exclusive CPUs are in (its annotation's)
    devices: str | None = None  # how policy.preferCloseToDevices placed it, or why it did not


class Registry:
    def __init__(
        self,
        policy: Policy,
        store: StateStore | None,
        header: Callable[[], Mapping[str, Any]] = dict,
    ) -> None:
        self.policy = policy
        self.store = store
        self._header = header  # what the state file says besides the containers
        self.entries: dict[str, Entry] = {}
        self.sequence = 0  # counts container bindings (see Enforcer.gone)
        self.dirty = False  # changes not yet written (`flush` writes them)
        self._journal: _Journal | None = None

    # -- reading -------------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    def by_container(self, container_id: str) -> Entry | None:
        for entry in self.entries.values():
            if entry.container_id == container_id:
                return entry
        return None

    def of_sandbox(self, sandbox_id: str) -> list[Entry]:
        return [e for e in self.entries.values() if e.sandbox_id == sandbox_id]

    def request(self, key: str) -> ContainerRequest:
        return self.policy.admitted[key].request

    def decision(self, key: str) -> Admitted:
        return self.policy.admitted[key]

    def placement(self, key: str) -> Placement:
        return self.policy.placement(key)

    def held(self) -> list[Entry]:
        """Containers the configuration cannot place, kept on what they hold."""
        return [e for e in self.entries.values() if self.policy.admitted[e.key].kind == "held"]

    # -- changing ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def change(self, *, durable: bool = True, sync_later: bool = False) -> Iterator[None]:
        """Groups changes; writes the state when the outermost group ends. A failed write
        rolls every change of the group back and raises StateWriteFailed. `sync_later`: the
        file is replaced now and made durable by `sync()`, which the caller must await before
        it reports the change to anyone outside this process."""
        if self._journal is not None:
            yield  # nested: the outer group writes
            return
        self._journal = _Journal({}, {})
        try:
            yield
            if not (sync_later and durable and self._append(self._journal)):
                self._write(durable=durable, sync_later=sync_later)
        except BaseException:
            self._rollback()
            raise
        finally:
            self._journal = None

    def _note(self, key: str) -> None:
        journal = self._journal
        if journal is None:
            raise RuntimeError("registry changes must be made inside Registry.change()")
        if key not in journal.entries:
            journal.entries[key] = self.entries.get(key)
            journal.decisions[key] = self.policy.admitted.get(key)

    def put(self, entry: Entry) -> None:
        self._note(entry.key)
        self.entries[entry.key] = entry

    def update(self, key: str, **changes: Any) -> Entry:
        self._note(key)
        entry = self.entries[key] = replace(self.entries[key], **changes)
        return entry

    def admit(self, request: ContainerRequest, *, keep: CPUSet | None = None) -> Placement:
        """The policy's decision for `request`; PlacementError when it does not fit."""
        self._note(request.key)
        return self.policy.admit(request, keep=keep)

    def hold(self, request: ContainerRequest, cpus: CPUSet, why: str) -> None:
        self._note(request.key)
        self.policy.hold(request, cpus)
        if request.key in self.entries:
            self.entries[request.key] = replace(self.entries[request.key], unplaced=why)

    def hold_claim(self, request: ContainerRequest, cpus: CPUSet) -> None:
        """A prepared DRA claim's CPUs held (enforcer.engine.claimed); ValueError when taken."""
        self._note(request.key)
        claimed.hold(self.policy, request, cpus)

    def remove(self, key: str) -> Admitted | None:
        self._note(key)
        self.entries.pop(key, None)
        return self.policy.release(key)

    def bind(self, key: str, container_id: str) -> Entry:
        """The runtime's id for an admitted container. Not written at once: which container is
        which is found again from the runtime after a crash (see `flush`)."""
        self.sequence += 1
        entry = self.entries[key] = replace(
            self.entries[key],
            container_id=container_id,
            phase=Phase.CREATED,
            bound_at=self.sequence,
        )
        self.dirty = True
        return entry

    def touch(self, key: str, **changes: Any) -> Entry | None:
        """A change that can be re-derived from the runtime after a crash (a phase, a binding):
        written lazily, within moments (see `flush`)."""
        entry = self.entries.get(key)
        if entry is None:
            return None
        if self._journal is not None:
            return self.update(key, **changes)
        entry = self.entries[key] = replace(entry, **changes)
        self.dirty = True
        return entry

    def set_applied(self, key: str, cpus: str, mems: str, *, verified: bool = False) -> None:
        """What the kernel was asked to (and, `verified`, was seen to) have; derivable, so
        written lazily like a binding."""
        entry = self.entries.get(key)
        if entry is not None:
            self.entries[key] = replace(
                entry, applied_cpus=cpus, applied_mems=mems, verified=verified, problem=None
            )
            self.dirty = True

    def set_problem(self, key: str, problem: str | None, *, verified: bool = False) -> None:
        entry = self.entries.get(key)
        if entry is not None and (entry.problem, entry.verified) != (problem, verified):
            self.entries[key] = replace(entry, problem=problem, verified=verified)
            self.dirty = True

    def _rollback(self) -> None:
        journal = self._journal
        if journal is None:
            return
        for key, before in journal.entries.items():
            if before is None:
                self.entries.pop(key, None)
            else:
                self.entries[key] = before
        for key, decision in journal.decisions.items():
            if self.policy.admitted.get(key) is decision:
                continue
            if decision is None:
                self.policy.release(key)
            else:
                self.policy.reinstate(decision)

    # -- the state file ------------------------------------------------------------------------

    def flush(self) -> None:
        """Writes changes that were left for later (bindings, applied pinnings)."""
        if self.dirty and self._journal is None:
            try:
                # Durable when an earlier change's fsync failed, or to fold a long journal
                # into the state file.
                store = self.store
                self._write(durable=store is not None and (store.sync_failed or store.journal_long))
            except StateWriteFailed as exc:
                if self.store is None or self.store.problem is None:  # else the store said it
                    log.error("%s; will retry", exc)

    def write_now(self) -> bool:
        """Writes the whole state durably now, outside any change (the state folder asked
        again after a write failed); whether it worked. The store says why when it did not."""
        if self._journal is not None:
            return False
        try:
            self._write(durable=True)
        except StateWriteFailed:
            return False
        return True

    def _write(self, *, durable: bool, sync_later: bool = False) -> None:
        self.dirty = False
        if self.store is None:
            return
        try:
            self.store.save(self.to_state(), durable=durable, sync_later=sync_later)
        except OSError as exc:
            self.dirty = True
            raise StateWriteFailed(
                f"cannot write the state file {self.store.path}: {exc.strerror or exc}"
            ) from None

    def _append(self, journal: _Journal) -> bool:
        """Writes a change as one journal record (what its keys are now); False when the store
        keeps no journal yet (the caller writes the whole state instead)."""
        if self.store is None:
            return True
        admitted = self.policy.admitted
        record = {
            "containers": {
                key: entry.to_dict() if (entry := self.entries.get(key)) else None
                for key in journal.entries
            },
            "admitted": {
                key: decision.to_dict() if (decision := admitted.get(key)) else None
                for key in journal.decisions
            },
            "policy": self.policy.state_header(),
        }
        try:
            written = self.store.append(record)
        except OSError as exc:
            raise StateWriteFailed(
                f"cannot write the state journal {self.store.journal_path}: {exc.strerror or exc}"
            ) from None
        if written:
            self.dirty = True  # the state file catches up lazily (`flush`)
        return written

    def sync(self) -> None:
        """Makes the state file durable after a `change(sync_later=True)` (fsync of the file
        and its folder; nothing when there is nothing to sync). StateWriteFailed when it
        cannot: the change stays made (it is in the file the next process reads), but a power
        cut could lose it, and the store refuses further decisions until it can write again."""
        if self.store is None:
            return
        try:
            self.store.sync()
        except OSError as exc:
            self.dirty = True  # `flush` writes it again, durably, until that works
            raise StateWriteFailed(
                f"cannot make the state file {self.store.path} durable: {exc.strerror or exc}"
            ) from None

    def to_state(self) -> dict[str, Any]:
        return {
            **self._header(),
            "policy": self.policy.to_state(),
            "containers": [e.to_dict() for e in self.entries.values()],
        }

    def restore(self, saved: Mapping[str, Any]) -> list[str]:
        """Loads a saved state: decisions first (their CPUs stay taken even before the runtime
        can be asked), then entries. A container the current configuration cannot place is
        kept on what it holds (see `place_again`). Returns what could not be placed."""
        previous: dict[str, Admitted] = {}
        for data in saved.get("policy", {}).get("admitted", []):
            with contextlib.suppress(KeyError, TypeError, ValueError):  # the policy reports it
                decision = Admitted.from_dict(data)
                previous[decision.request.key] = decision
        held, policy_state = claimed.split_claims(saved.get("policy", {}))
        problems = claimed.hold_saved(self.policy, held)  # before any container is placed
        problems += self.policy.restore(policy_state)
        for data in saved.get("containers", []):
            entry = Entry.from_dict(data)
            if entry.key in previous:
                self.entries[entry.key] = entry
        unplaced = [e for k, e in previous.items() if k not in self.policy.admitted]
        for admitted in unplaced:
            if admitted.request.key in self.entries:
                self._place_again(admitted, "after the restart")
        for key in [k for k in self.entries if k not in self.policy.admitted]:
            self.entries.pop(key)
        return problems

    def _place_again(self, before: Admitted, when: str) -> str:
        """Places a running container that its decision no longer fits: on the shared pool if
        it can go there, else kept on the CPUs it holds, which nobody else gets."""
        request = before.request
        name = f"{request.namespace}/{request.pod_name}/{request.container}"
        shared = replace(request, preferences=replace(request.preferences, shared=True))
        with contextlib.suppress(PlacementError):
            self.policy.admit(shared)  # its CPUs are freed once the re-pin moved it off them
            if request.key in self.entries:
                self.entries[request.key] = demoted(
                    replace(self.entries[request.key], unplaced=None),
                    f"{when}, it no longer fits as asked",
                    request,
                )
            return f"{name}: no longer fits; placed on the shared pool"
        holds = before.exclusive
        why = f"{when}, the configuration cannot place it; kept on CPUs {holds or 'none'}"
        self.policy.hold(request, holds)
        if request.key in self.entries:
            self.entries[request.key] = replace(self.entries[request.key], unplaced=why)
        log.error("%s: %s", name, why)
        return f"{name}: cannot be placed; kept on the CPUs it holds ({holds or 'none'})"

    def place_held(self) -> list[str]:
        """Tries again to place the held containers; returns those now placed."""
        placed = []
        for entry in self.held():
            held = self.policy.admitted[entry.key]
            try:
                with self.change():
                    self.admit(held.request, keep=held.exclusive or None)
                    self.update(entry.key, unplaced=None)
            except (PlacementError, StateWriteFailed):
                continue  # the change was rolled back: still held
            placed.append(entry.key)
        return placed

    def place_as_asked(self) -> list[str]:
        """Tries again to place the containers put on the shared pool for want of CPUs (see
        `demoted`) as they asked, through the same admission; returns those now placed. One
        that still does not fit stays as it is (it was reported when it was put there)."""
        placed = []
        for entry in [e for e in self.entries.values() if e.demoted and e.stuck is None]:
            before = self.policy.admitted.get(entry.key)
            if before is None:
                continue
            request = before.request
            asked = replace(
                request, preferences=replace(request.preferences, shared=entry.asked_shared)
            )
            try:
                with self.change():
                    placement = self.admit(asked)
                    self.update(entry.key, demoted=None, asked_shared=None)
            except (PlacementError, StateWriteFailed):
                continue  # rolled back: still on the shared pool
            placed.append(entry.key)
            log.info(
                "%s/%s container %s placed as asked now that its CPUs are free: %s cpus=%s",
                request.namespace,
                request.pod_name,
                request.container,
                placement.kind,
                placement.cpus,
            )
        return placed

    def rebuild(self, policy: Policy) -> list[str]:
        """Moves every decision onto a new policy (a new configuration): containers keep their
        CPUs where it allows, the others are placed anew or held. Returns what moved."""
        old = self.policy
        held, policy_state = claimed.split_claims(old.to_state())
        for problem in claimed.hold_saved(policy, held):
            log.error("after reconfiguration, %s", problem)
        problems = dict(_by_name(p) for p in policy.restore(policy_state))
        self.policy = policy
        notes = []
        for key, before in old.admitted.items():
            request = before.request
            name = f"{request.namespace}/{request.pod_name}/{request.container}"
            if key not in policy.admitted:
                note = self._place_again(before, "after reconfiguration")
                if name in problems and "shared pool" in note:
                    note = f"{name}: {problems[name]}; placed on the shared pool"
                notes.append(note)
                continue
            after = policy.admitted[key].exclusive
            if before.exclusive != after:
                notes.append(
                    f"{name}: exclusive CPUs {before.exclusive or 'none'} -> {after or 'none'}"
                )
        return notes

    # -- views ---------------------------------------------------------------------------------

    def views(self) -> list[ContainerView]:
        return views_of(self.policy, self.entries)


def demoted(entry: Entry, why: str, asked: ContainerRequest) -> Entry:
    """The entry of a container placed on the shared pool instead of as `asked` (the
    registry's periodic `place_as_asked` tries again)."""
    if entry.demoted is not None:  # placed again meanwhile: what it first asked still counts
        return entry
    return replace(
        entry,
        demoted=f"{why}: on the shared pool until the CPUs it asks for are free",
        asked_shared=asked.preferences.shared,
    )


def views_of(policy: Policy, entries: Mapping[str, Entry]) -> list[ContainerView]:
    """One row per admitted entry; DRA claims and their containers as `claimed.shown_as`."""
    rows = []
    for key, admitted in policy.admitted.items():
        req = admitted.request
        kind, pool, decided_cpus, decided_mems, exclusive = claimed.shown_as(policy, admitted)
        entry = entries.get(key)
        rows.append(
            ContainerView(
                key=key,
                namespace=req.namespace,
                pod=req.pod_name,
                container=req.container,
                container_id=entry.container_id if entry else None,
                qos=req.qos,
                kind=kind,
                pool=pool,
                cpus=_shown(decided_cpus, entry.applied_cpus if entry else None),
                mems=_shown(decided_mems, entry.applied_mems if entry else None),
                exclusive=str(exclusive),
                rdt_class=req.rdt_class,
                blockio_class=req.blockio_class,
                cpu_class=req.cpu_class if policy.cpu_class_ignored(key) is None else None,
                devices=policy.device_note(key),
                phase=entry.phase.value if entry else "",
                problem="; ".join(
                    p for p in (entry.unplaced, entry.stuck, entry.demoted, entry.problem) if p
                )
                or None
                if entry
                else None,
            )
        )
    return rows


def _shown(decided: CPUSet | None, applied: str | None) -> str | None:
    """What the container has; with the policy's value beside it while a re-pin is pending."""
    if decided is None or applied is None or str(decided) == applied:
        return applied if applied else (str(decided) if decided is not None else None)
    return f"{applied} (to {decided})"


def _by_name(problem: str) -> tuple[str, str]:
    name, _, why = problem.partition(": ")
    return name, why
