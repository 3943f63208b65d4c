"""The enforcer's configuration, read whole: the contract's schema, then its controllers' checks.

The webhook reads the same file through `resource_files.config_file` (the schema of
`resource_contract.config`) alone; the enforcer also
checks the goresctrl value formats of `rdt` and `blockio` before it uses them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from enforcer.controllers.registry import CONFIG_CHECKS
from resource_contract import config as schema
from resource_contract.config import Config
from resource_files import config_file


def parse_config(data: Any) -> Config:
    """Validates already-loaded YAML; raises ConfigError naming each problem's key path."""
    return schema.parse_config(data, CONFIG_CHECKS)


def load_config(path: str | Path) -> Config:
    """Reads and validates a configuration file."""
    return config_file.load_config(path, CONFIG_CHECKS)
