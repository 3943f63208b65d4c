"""A configuration file read (a regular file of UTF-8 text within CONFIG_LIMITS) and checked."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from resource_contract.bounded import BoundError
from resource_contract.config import (
    CONFIG_LIMITS,
    Config,
    ConfigCheck,
    ConfigError,
    config_data,
    parse_config,
)
from resource_files.reads import read_text_file


def read_config_data(path: str | Path) -> Any:
    """A configuration file's YAML: a regular file of UTF-8 text within CONFIG_LIMITS;
    ConfigError saying why not, one line."""
    try:
        text = read_text_file(path, CONFIG_LIMITS)
    except BoundError as exc:
        raise ConfigError([f"{path}: {exc}"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    return config_data(text, str(path))


def load_config(path: str | Path, checks: Iterable[ConfigCheck] = ()) -> Config:
    """Reads and validates a configuration file (see `parse_config`)."""
    return parse_config(read_config_data(path), checks)
