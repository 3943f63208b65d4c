"""The fault suite: faults injected into the enforcer, containerd and the state folder, with the
truth read from the runtime and the cgroups after each (docs/reliability.md)."""
