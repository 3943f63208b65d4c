"""The configuration file both programs read (see docs/configuration.md)."""

from enforcer.config.model import (
    BlockIOConfig,
    Config,
    ConfigError,
    PolicyConfig,
    RDTConfig,
    load_config,
    parse_config,
)

__all__ = [
    "BlockIOConfig",
    "Config",
    "ConfigError",
    "PolicyConfig",
    "RDTConfig",
    "load_config",
    "parse_config",
]
