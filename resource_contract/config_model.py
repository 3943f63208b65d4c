"""The base of the configuration's schema models: strict pydantic models, and the names that
become folder names."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from resource_contract.classes import CLASS_NAME_PATTERN

CLASS_NAME = re.compile(CLASS_NAME_PATTERN)


class StrictModel(BaseModel):
    # strict: a boolean is not a number (`minCPUs: true` is no 1), a string no number either
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


def safe_names(mapping: dict[str, Any], what: str) -> dict[str, Any]:
    """Names become folder names: only the contract's pattern is allowed."""
    for name in mapping:
        if not CLASS_NAME.fullmatch(name):
            raise ValueError(f'{what} "{name}" must match {CLASS_NAME_PATTERN}')
    return mapping
