"""What the runtime's NRI version offers the plugin: events, per-event calls, the RDT field.

The plugin speaks NRI v0.12 (containerd 2.4) and stays wire-compatible with v0.6.1 (containerd
1.7). The two ends exchange versions: the plugin names its own in RegisterPlugin, and a v0.12
runtime names its own in Configure (older runtimes leave the field empty). From that version:

- the event mask: v0.6.1 refuses a Configure whose answer sets a bit over 0x7ff, so events
  added later (UPDATE_POD_SANDBOX, v0.10) are asked for only from a runtime that says it has
  them;
- the RDT class: v0.6.1 writes ``resources.rdt_class`` into the OCI spec's CLOS unchecked,
  while v0.11 and later resolve that field against the runtime's own RDT configuration (and
  fail the creation without one) and take the CLOS as ``linux.rdt.clos_id`` instead.

Per-event calls (RunPodSandbox ... RemoveContainer) need no negotiation: a v0.12 runtime calls
them, a v0.6.1 one sends StateChange; the plugin serves both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from enforcer.nriapi import api_pb2

# The NRI release whose API proto/nri/api.proto follows (containerd 2.4.2's).
PLUGIN_NRI_VERSION = "v0.12.3"
V0_6_MASK = 0x7FF  # events 1-11: all that NRI v0.6.1 accepts in a Configure answer

E = api_pb2.Event
# The events the engine needs, from every runtime.
BASE_EVENTS = (
    E.RUN_POD_SANDBOX,
    E.STOP_POD_SANDBOX,
    E.REMOVE_POD_SANDBOX,
    E.CREATE_CONTAINER,
    # containerd waits for its acknowledgement before it answers kubelet's CreateContainer:
    # given once the decision is durable (fdatasync while containerd creates the container).
    E.POST_CREATE_CONTAINER,
    E.START_CONTAINER,
    # The ends of a start and of an update: unsolicited updates wait for them
    # (enforcer.nri.update_sender).
    E.POST_START_CONTAINER,
    E.UPDATE_CONTAINER,
    E.POST_UPDATE_CONTAINER,
    E.STOP_CONTAINER,
    E.REMOVE_CONTAINER,
)
_VERSION = re.compile(r"^v?(\d{1,4})\.(\d{1,4})\.(\d{1,4})")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``v0.12.3`` (or a pseudo-version ``v0.9.1-0.2025...``) as numbers; None for an empty,
    ``unknown`` or malformed version."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def mask_of(events: tuple[int, ...]) -> int:
    return sum(1 << (event - 1) for event in events)


@dataclass(frozen=True)
class Offer:
    """What the connected runtime offers; ``version`` None: it did not say (NRI before v0.12,
    treated as v0.6.1, whose features every later release keeps)."""

    version: tuple[int, int, int] | None = None

    @classmethod
    def of(cls, nri_version: str) -> Offer:
        return cls(parse_version(nri_version))

    def at_least(self, minor: int) -> bool:
        return self.version is not None and self.version >= (0, minor, 0)

    @property
    def update_pod_sandbox(self) -> bool:
        """UpdatePodSandbox (pod-level resources resized in place): v0.10 and later."""
        return self.at_least(10)

    @property
    def rdt_clos(self) -> bool:
        """The RDT class goes in ``linux.rdt.clos_id``: v0.11 and later."""
        return self.at_least(11)

    @property
    def events(self) -> tuple[int, ...]:
        extra = (E.UPDATE_POD_SANDBOX,) if self.update_pod_sandbox else ()
        return BASE_EVENTS + extra

    @property
    def event_mask(self) -> int:
        return mask_of(self.events)

    def describe(self) -> str:
        if self.version is None:
            return "NRI version not given (before v0.12)"
        return "NRI v{}.{}.{}".format(*self.version)
