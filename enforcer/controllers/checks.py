"""Every controller's check of its own configuration section, registered in one place."""

from __future__ import annotations

from enforcer.controllers.blockio import check_blockio
from enforcer.controllers.rdt.allocation import check_rdt
from resource_contract.config import Config, ConfigCheck


def _rdt(config: Config) -> list[str]:
    return check_rdt(config.rdt)


def _blockio(config: Config) -> list[str]:
    return check_blockio(config.blockio)


# In the order their problems are reported.
CONFIG_CHECKS: tuple[ConfigCheck, ...] = (_rdt, _blockio)
