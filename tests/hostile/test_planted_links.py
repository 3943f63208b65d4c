"""Links planted where the programs write: the state file, the last-good configuration, the
lock, the health file, the webhook's keys and certificates. Nothing is written through a link
(its target keeps its bytes), what is written has the right mode (keys 0600, folders 0700),
and no temporary file is left behind."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from enforcer.app.health import HealthFile
from enforcer.cluster import LastGoodStore, StoredConfig
from enforcer.handover import StateLock
from enforcer.state import StateStore
from enforcer.state.store import StateWriteError
from resource_files.safe_files import UnsafePath, private_dir, write_file
from tests.hostile.conftest import Measured

BIN = Path(sys.executable).parent
SECRET = b"the victim's bytes\n"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file elsewhere that an attacker wants overwritten (or read, or made readable)."""
    path = tmp_path / "elsewhere" / "victim"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def untouched(victim: Path) -> bool:
    return victim.read_bytes() == SECRET and mode(victim) == 0o600


def test_write_file_refuses_a_link_at_the_target(tmp_path: Path, victim: Path) -> None:
    target = tmp_path / "out" / "state.json"
    target.parent.mkdir()
    target.symlink_to(victim)
    with pytest.raises(UnsafePath) as err:
        write_file(target, b"new")
    assert err.value.errno == errno.ELOOP
    assert f"{target} is a symbolic link; refusing to write through it" in str(err.value)
    assert untouched(victim) and target.is_symlink()
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]


def test_a_link_at_the_temporary_name_is_removed_not_followed(tmp_path: Path, victim: Path) -> None:
    target = tmp_path / "tls.key"
    (tmp_path / ".tls.key.tmp").symlink_to(victim)
    old = os.umask(0)  # the mode is set exactly, whatever the umask
    try:
        write_file(target, b"key")
    finally:
        os.umask(old)
    assert untouched(victim)
    assert target.read_bytes() == b"key" and mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "tls.key"]


def test_write_file_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UnsafePath, match="is not a regular file"):
        write_file(fifo, b"x")
    (tmp_path / "dir").mkdir()
    with pytest.raises(UnsafePath, match="is not a regular file"):
        write_file(tmp_path / "dir", b"x")


def test_private_dir_modes_and_links(tmp_path: Path, victim: Path) -> None:
    made = private_dir(tmp_path / "a" / "state")
    assert mode(made) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    assert mode(private_dir(loose)) == 0o700  # the program's own folder is tightened
    named = tmp_path / "named"
    named.mkdir()
    named.chmod(0o755)
    assert mode(private_dir(named, fix_mode=False)) == 0o755  # a folder the user named: as is
    link = tmp_path / "linked"
    link.symlink_to(victim.parent)
    with pytest.raises(UnsafePath, match="is a symbolic link"):
        private_dir(link)
    assert stat.S_IMODE(victim.parent.stat().st_mode) == 0o755


def test_the_state_store_writes_0600_in_0700_and_refuses_links(
    tmp_path: Path, victim: Path, measured: Measured
) -> None:
    store = StateStore(tmp_path / "state")
    store.ensure_dir()
    assert store.problem is None
    assert mode(store.dir) == 0o700
    store.save({"entries": {}})
    assert mode(store.path) == 0o600
    store.path.unlink()
    store.path.symlink_to(victim)
    with pytest.raises(StateWriteError):
        store.save({"entries": {}})
    assert untouched(victim)
    assert store.problem is not None and "is a symbolic link" in store.problem
    # Read through the link: refused too (never parsed, never moved aside, never written over).
    fresh = StateStore(tmp_path / "state")
    assert fresh.load() is None
    assert fresh.read_problem is not None and "(ELOOP)" in fresh.read_problem
    assert store.path.is_symlink() and untouched(victim)
    # A state folder that is a link is refused as a whole.
    linked = StateStore(tmp_path / "linked-state")
    (tmp_path / "linked-state").symlink_to(victim.parent)
    linked.ensure_dir()
    assert linked.problem is not None and "is a symbolic link" in linked.problem
    assert stat.S_IMODE(victim.parent.stat().st_mode) == 0o755
    measured(
        "a link planted at the enforcer's state.json (and at its folder)",
        "refused: nothing written or read through it",
        "refused (ELOOP); the link's target unchanged",
    )


def test_status_refuses_a_linked_state_file(tmp_path: Path, victim: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "state.json").symlink_to(victim)
    out = subprocess.run(
        [str(BIN / "resource-enforcer"), "status", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out
    assert "cannot be read: Too many levels of symbolic links (ELOOP)" in out.stderr


def test_the_last_good_configuration_refuses_links(tmp_path: Path, victim: Path) -> None:
    store = LastGoodStore(tmp_path)
    stored = StoredConfig("configmap/ns/name", "7", "policy: {name: none}\n")
    store.save(stored)
    assert mode(store.path) == 0o600
    assert store.load() == stored
    store.path.unlink()
    store.path.symlink_to(victim)
    with pytest.raises(UnsafePath):
        store.save(stored)
    assert store.load() is None  # not read through the link either
    assert untouched(victim)


def test_the_lock_and_the_health_file_refuse_links(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "enforcer.lock").symlink_to(victim)
    lock = StateLock(tmp_path)
    with pytest.raises(OSError) as err:
        lock.try_acquire()
    assert err.value.errno == errno.ELOOP
    health = tmp_path / "run" / "health"
    HealthFile(str(health)).write("serving")
    assert health.read_text() == "serving\n" and mode(health.parent) == 0o700
    health.unlink()
    health.symlink_to(victim)
    with pytest.raises(UnsafePath):
        HealthFile(str(health)).write("serving")
    assert untouched(victim)


def test_webhook_certs_refuses_a_link_at_a_key_and_writes_private_modes(
    tmp_path: Path, victim: Path, measured: Measured
) -> None:
    out = tmp_path / "new" / "certs"
    certs = [str(BIN / "resource-webhook"), "certs", "--service", "resource-webhook"]
    certs += ["--namespace", "resource-enforcer", "--out", str(out)]
    done = subprocess.run(certs, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert mode(out) == 0o700
    modes = {p.name: mode(p) for p in out.iterdir()}
    assert modes == {
        "ca.key": 0o600,
        "tls.key": 0o600,
        "webhook-secret.yaml": 0o600,
        "ca.crt": 0o644,
        "tls.crt": 0o644,
        "ca-bundle.b64": 0o644,
    }
    (out / "tls.key").unlink()
    (out / "tls.key").symlink_to(victim)
    done = subprocess.run(certs, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "tls.key is a symbolic link; refusing to write through it" in done.stderr
    assert "Traceback" not in done.stderr
    assert untouched(victim)
    measured(
        "a link planted at the webhook's tls.key before `resource-webhook certs`",
        "refused with a message, exit != 0; keys 0600, folder 0700",
        f"exit {done.returncode}; the link's target unchanged",
    )
