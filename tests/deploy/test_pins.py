"""Pinned versions: constraints.txt covers every dependency pyproject.toml declares (runtime,
test, build) with an exact version that satisfies it, and everything those pull in; `make
install` and both Dockerfiles install from it; the images' default base is an exact Python
patch release on a named Debian release; the test base checks its Python release."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.manifests import dockerfile

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ["enforcer", "webhook"]
# An exact CPython patch release on a named Debian release, optionally with its digest.
PINNED_BASE = re.compile(r"python:3\.\d+\.\d+-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?")


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), f"not exact: {line}"
        key = canonicalize_name(name)
        assert key not in out, f"pinned twice: {name}"
        out[key] = version
    return out


def declared() -> list[Requirement]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    listed = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    return [Requirement(r) for r in [*listed, *data["build-system"]["requires"]]]


@pytest.mark.parametrize("requirement", declared(), ids=str)
def test_every_declared_dependency_is_pinned_within_its_range(requirement: Requirement) -> None:
    pinned = pins()
    name = canonicalize_name(requirement.name)
    assert name in pinned, f"{requirement} is not in constraints.txt: run `make constraints`"
    assert requirement.specifier.contains(pinned[name], prereleases=True), (
        f"constraints.txt pins {name}=={pinned[name]}, outside pyproject's {requirement}"
    )


def test_the_lock_is_closed_over_what_the_pinned_packages_require() -> None:
    """Each pinned package that this venv has at the pinned version: whatever it requires (for
    the extras asked of it, on this platform) is pinned too, within the range it asks."""
    pinned = pins()
    extras: dict[str, set[str]] = {}
    for req in declared():
        extras.setdefault(canonicalize_name(req.name), set()).update(req.extras)
    checked = 0
    for name, version in pinned.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for line in dist.requires or []:
            sub = Requirement(line)
            envs = [{"extra": e} for e in extras.get(name, set()) | {""}]
            if sub.marker is not None and not any(sub.marker.evaluate(e) for e in envs):
                continue
            sub_name = canonicalize_name(sub.name)
            assert sub_name in pinned, f"{name} requires {sub}, not in constraints.txt"
            assert sub.specifier.contains(pinned[sub_name], prereleases=True), (
                f"{name} requires {sub}; constraints.txt pins {pinned[sub_name]}"
            )
        extras.setdefault(name, set())
    assert checked >= len(pinned) // 2, "this venv was not installed from constraints.txt"


def test_the_lock_is_what_the_generator_writes_for_this_venv() -> None:
    """`make constraints` reproduces the committed file when the venv has the pinned versions
    (a venv with other versions fails, naming them: a venv to reinstall, or a lock to bump)."""
    pinned = pins()
    have = {}
    for name in pinned:
        try:
            have[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            have[name] = None
    if have != pinned:
        differ = sorted(n for n in pinned if have[n] != pinned[n])
        # `make install` installs from the lock: a venv that differs is one to reinstall
        # (`make clean install`), or a lock to bump (`make constraints`).
        pytest.fail(
            f"this venv differs from constraints.txt in {', '.join(differ[:5])}", pytrace=False
        )
    out = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "constraints.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def test_make_install_uses_the_lock() -> None:
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "/pip install" in line]
    assert installs
    for line in installs:
        assert "PIP_CONSTRAINT=$(CURDIR)/constraints.txt" in line, line
    assert re.search(r"^\$\(STAMP\):.*constraints\.txt", makefile, re.M)


@pytest.mark.parametrize("program", PROGRAMS)
def test_images_install_from_the_lock_on_a_pinned_base(program: str) -> None:
    d = dockerfile(ROOT / f"Dockerfile.{program}")
    (arg,) = d["ARG"]
    name, _, default = arg.partition("=")
    assert name == "BASE_IMAGE" and PINNED_BASE.fullmatch(default), arg
    assert any("constraints.txt" in c for c in d["COPY"])
    (run,) = d["RUN"]
    assert "export PIP_CONSTRAINT=/src/constraints.txt" in run
    steps = [s.strip() for s in run.split("&&")]
    first_pip = next(i for i, s in enumerate(steps) if s.startswith("pip "))
    assert steps.index("export PIP_CONSTRAINT=/src/constraints.txt") < first_pip
    pinned = pins()
    for quoted in re.findall(r'"([^"]+)"', run):
        req = Requirement(quoted)
        assert canonicalize_name(req.name) in pinned, quoted


def test_the_test_base_checks_its_python_release() -> None:
    script = (ROOT / ".ci" / "base-image.sh").read_text()
    (version,) = re.findall(r"^PYTHON_VERSION=(\d+\.\d+\.\d+)$", script, re.M)
    both = {dockerfile(ROOT / f"Dockerfile.{p}")["ARG"][0] for p in PROGRAMS}
    assert len(both) == 1  # one base for both images
    assert "python3.11-minimal=" in script and '"$PYTHON_VERSION"-*' in script
    assert version.startswith("3.11.")
