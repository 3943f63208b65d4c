"""Device globs against this machine's /dev: through symlinks to whole-disk block devices;
character devices, plain files and partitions refused when named, skipped when globbed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.blockio import BlockDevice, compile_classes, resolve_devices
from resource_contract.config import ConfigError

Disk = tuple[str, int, int]


def test_a_disk_by_name_and_through_symlinks(disk: Disk, tmp_path: Path) -> None:
    path, major, minor = disk
    (tmp_path / "by-id").mkdir()
    (tmp_path / "by-id" / "virtio-disk0").symlink_to(path)
    (tmp_path / "chain").symlink_to(tmp_path / "by-id" / "virtio-disk0")
    found = resolve_devices([path, str(tmp_path / "by-id" / "*disk*"), str(tmp_path / "chain")])
    assert found.devices == (BlockDevice(major, minor, path),)  # one device, found three ways
    assert found.devices[0].key == f"{major}:{minor}"
    assert found.problems == found.warnings == ()


def test_go_glob_syntax(disk: Disk, tmp_path: Path) -> None:
    for name in ("da", "db", "d?"):
        (tmp_path / name).symlink_to(disk[0])
    assert len(resolve_devices([str(tmp_path / "d[^b]")]).devices) == 1  # Go's negation
    found = resolve_devices([str(tmp_path / "d\\?")])  # Go's escape: the file named "d?"
    assert [d.major for d in found.devices] == [disk[1]]


def test_character_devices_and_files_are_refused_by_name() -> None:
    found = resolve_devices(["/dev/null", "/etc/hostname"], key_path="X")
    assert found.devices == ()
    assert found.problems == (
        'X.0: "/dev/null" is a character device, not a block device',
        'X.1: "/etc/hostname" is not a device',
    )


def test_glob_matches_that_are_not_disks_are_skipped(disk: Disk, tmp_path: Path) -> None:
    (tmp_path / "null").symlink_to("/dev/null")
    (tmp_path / "nvda").symlink_to(disk[0])
    found = resolve_devices([str(tmp_path / "n*")], key_path="X")
    assert [d.path for d in found.devices] == [disk[0]]
    assert found.problems == ()
    assert found.warnings == (
        f'X.0: "{tmp_path}/n*" also matches {tmp_path}/null: not whole-disk block devices, skipped',
    )


def test_a_glob_matching_nothing_is_a_warning() -> None:
    found = resolve_devices(["/dev/no-such-disk*", "/dev/no-such-disk"], key_path="X")
    assert found.devices == found.problems == ()
    assert found.warnings == (
        'X.0: "/dev/no-such-disk*" matches no device on this machine',
        'X.1: "/dev/no-such-disk" matches no device on this machine',
    )


def fake_partition_sysfs(root: Path, disk: Disk) -> Path:
    """sysfs as it is for a partition: /sys/dev/block/M:m -> .../block/<disk>/<disk>1, which
    has a `partition` file, next to the disk's own folder."""
    name = Path(disk[0]).name
    part = root / "devices" / "virtual" / "block" / name / f"{name}1"
    part.mkdir(parents=True)
    (part.parent / "dev").write_text(f"{disk[1]}:{disk[2] + 100}\n")
    (part / "dev").write_text(f"{disk[1]}:{disk[2]}\n")
    (part / "partition").write_text("1\n")
    (root / "dev" / "block").mkdir(parents=True)
    (root / "dev" / "block" / f"{disk[1]}:{disk[2]}").symlink_to(part)
    return root


def test_partitions_are_refused_by_name_and_skipped_by_glob(disk: Disk, tmp_path: Path) -> None:
    sysfs = fake_partition_sysfs(tmp_path / "sys", disk)
    name = Path(disk[0]).name
    found = resolve_devices([disk[0]], key_path="X", sysfs_root=str(sysfs))
    assert found.problems == (
        f'X.0: "{disk[0]}" is a partition ({disk[1]}:{disk[2]}); weights and throttling apply '
        f"to whole disks: use /dev/{name}",
    )
    globbed = resolve_devices([disk[0] + "*"], key_path="X", sysfs_root=str(sysfs))
    assert globbed.problems == () and globbed.devices == ()
    assert "not whole-disk block devices, skipped" in globbed.warnings[0]


def test_compile_with_real_devices_and_key_paths(disk: Disk) -> None:
    config = parse_config(
        {
            "blockio": {
                "Classes": {
                    "slow": [
                        {"Weight": 80},
                        {"Devices": [disk[0]], "ThrottleReadBps": "50M"},
                        {"Devices": ["/dev/null", disk[0]], "ThrottleWriteBps": "1M"},
                    ]
                }
            }
        }
    ).blockio
    with pytest.raises(ConfigError) as err:
        compile_classes(config)
    assert err.value.problems == [
        'blockio.Classes.slow.2.Devices.0: "/dev/null" is a character device, not a block device'
    ]
    os.stat(disk[0])  # still there
