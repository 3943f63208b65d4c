"""RDT and block-I/O classes in the enforcer's flow: checked at CreateContainer, applied at
StartContainer, re-applied when the configuration changes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from enforcer.controllers.blockio import BlockIOController
from enforcer.controllers.cgroups import task_cgroup_dir
from enforcer.controllers.errors import ApplyError, ClassError, ClassUnavailable
from enforcer.controllers.rdt import RdtController
from enforcer.decode import ContainerRequest
from enforcer.metrics import EnforcerMetrics
from enforcer.refusal import Reason, Refusal
from resource_contract.config import Config

log = logging.getLogger(__name__)


class ClassRefused(Refusal):
    """An explicit class request that cannot be applied on this node."""


class ClassControllers:
    def __init__(
        self,
        rdt: RdtController,
        blockio: BlockIOController,
        metrics: EnforcerMetrics,
        *,
        cgroupfs_root: str,
    ) -> None:
        self.rdt = rdt
        self.blockio = blockio
        self.metrics = metrics
        self.cgroupfs_root = cgroupfs_root

    def configure(self, config: Config) -> list[str]:
        """Applies the class definitions; ConfigError (nothing changed) when they are refused."""
        # Block I/O is validated first: RDT's configure validates everything before it writes.
        self.blockio.compile(config.blockio)
        warnings = self.rdt.configure(config.rdt)
        warnings += self.blockio.configure(config.blockio)
        for warning in warnings:
            log.warning("%s", warning)
        return warnings

    def check(self, request: ContainerRequest) -> ContainerRequest:
        """The request with only the classes that will be applied; ClassRefused for an explicit
        request that cannot be."""
        rdt, blockio = request.rdt_class, request.blockio_class
        try:
            if rdt is not None and not self.rdt.check(rdt, explicit=request.rdt_explicit):
                rdt = None
            if blockio is not None and not self.blockio.check(
                blockio, explicit=request.blockio_explicit
            ):
                blockio = None
        except ClassUnavailable as exc:
            raise ClassRefused(
                Reason.NOT_SUPPORTED,
                f"pod {request.namespace}/{request.pod_name}: {exc}",
            ) from None
        except ClassError as exc:
            raise ClassRefused(
                Reason.BAD_REQUEST,
                f"pod {request.namespace}/{request.pod_name}: {exc}",
            ) from None
        if (rdt, blockio) == (request.rdt_class, request.blockio_class):
            return request
        return replace(request, rdt_class=rdt, blockio_class=blockio)

    def apply(self, request: ContainerRequest, cgroup_parent: str, container_id: str) -> None:
        """Puts a started container into its classes. The container runs already: failures are
        logged and counted, never raised."""
        if request.rdt_class is not None:
            self._count(
                "rdt",
                request.rdt_class,
                lambda: self.rdt.assign_cgroup(
                    request.rdt_class or "",
                    task_cgroup_dir(cgroup_parent, container_id, self.cgroupfs_root),
                    explicit=request.rdt_explicit,
                ),
                container_id,
            )
        self.apply_blockio(request, cgroup_parent, container_id)

    def apply_blockio(
        self, request: ContainerRequest, cgroup_parent: str, container_id: str
    ) -> None:
        name = request.blockio_class
        if name is None:
            return

        def write() -> bool:
            result = self.blockio.apply(
                name, cgroup_parent, container_id, explicit=request.blockio_explicit
            )
            for warning in result.warnings:
                log.warning("container %s: %s", container_id, warning)
            return result.applied

        self._count("blockio", name, write, container_id)

    def _count(self, kind: str, name: str, action: Callable[[], bool], container_id: str) -> None:
        try:
            applied = action()
        except (ClassError, ApplyError, OSError) as exc:
            log.error("container %s: %s class %s not applied: %s", container_id, kind, name, exc)
            self.metrics.class_applications.labels(kind, name, "failed").inc()
            self.metrics.controller_errors.labels(kind).inc()
            return
        outcome = "applied" if applied else "skipped"
        self.metrics.class_applications.labels(kind, name, outcome).inc()
        log.info("container %s: %s class %s %s", container_id, kind, name, outcome)
