"""Modules that run inside the cgroup v2 VM only (tests/vm/test_vm_end_to_end.py runs them
there and checks that every case ran and passed): on a cgroup v1 machine they are not
collected, since what they test does not exist there."""

from __future__ import annotations

from tests.support.cgroupfs import unified

collect_ignore_glob = [] if unified() else ["test_*.py"]
