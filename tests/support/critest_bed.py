"""What critest runs against: one runtime of the matrix with the relay in front of it.

``CritestBed(name, folder)`` starts, in order: a loopback registry serving critest's images
(tests.support.critest_images); a private containerd of release ``name`` whose image service
mirrors the upstream registries to it (``hosts.toml``), or a private CRI-O doing the same
(``registries.conf``), with a bridge network for its pods (tests.support.critest.with_cni);
and ``resource-enforcer run`` in front of that runtime (static policy, CPU 0 reserved: the
relay doing its job, not a bare pipe). ``direct`` and ``relay`` are the two CRI sockets
critest is run against. Used by tests/critest and ``python -m bench critest``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import TracebackType

from tests.support.containerd import PrivateContainerd
from tests.support.crio import CRIO, PrivateCrio, crio_available
from tests.support.critest import remove_bridge, with_cni
from tests.support.critest_images import serve_critest_images
from tests.support.enforcer_process import EnforcerProcess
from tests.support.registry import LocalRegistry
from tests.support.runtimes import RELEASES, NriContainerd

RELAY_CONFIG = 'policy: {name: static, reservedCPUs: "0"}\n'


class CritestBed:
    """A registry, a runtime and the relay in front of it, in ``folder``; a context manager."""

    def __init__(self, release: str, folder: Path) -> None:
        self.name = release
        self.folder = folder
        self.registry = LocalRegistry(folder / "registry")
        self.runtime: PrivateContainerd | None = None
        self.relay_process: EnforcerProcess | None = None
        self._bridge: str | None = None
        self._stack = contextlib.ExitStack()

    def unavailable(self) -> str | None:
        from tests.support.critest import critest_available
        from tests.support.registry import registry_available

        runtime = crio_available() if self.name == CRIO else RELEASES[self.name].unavailable()
        return runtime or registry_available() or critest_available()

    @property
    def direct(self) -> str:
        assert self.runtime is not None
        return self.runtime.socket

    @property
    def nri_socket(self) -> str:
        assert self.runtime is not None
        return str(self.runtime.nri_socket)  # type: ignore[attr-defined]

    @property
    def relay(self) -> str:
        assert self.relay_process is not None
        return self.relay_process.relay_socket

    def __enter__(self) -> CritestBed:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.registry.start()
        serve_critest_images(self.registry, self.folder / "images")
        if self.name == CRIO:
            self.runtime = PrivateCrio(self.folder / "runtime", registry=self.registry)
        else:
            hosts = self.registry.containerd_hosts(self.folder / "hosts")
            self.runtime = NriContainerd(
                self.folder / "runtime", release=self.name, registry_config=hosts
            )
        self._bridge = with_cni(self.runtime.workdir)
        self.runtime.start()
        config = self.folder / "relay-config.yaml"
        config.write_text(RELAY_CONFIG)
        self.relay_process = EnforcerProcess(
            self.folder / "relay",
            runtime_socket=self.runtime.socket,
            config=str(config),
            extra_args=["--log-level", "info"],
        )
        self.relay_process.start()

    def close(self) -> None:
        if self.relay_process is not None:
            with contextlib.suppress(Exception):
                self.relay_process.stop()
        if self.runtime is not None:
            self.runtime.close()
        if self._bridge is not None:
            remove_bridge(self._bridge)
        self.registry.close()
