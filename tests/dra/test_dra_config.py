"""The `dra:` configuration section: defaults, and bad values refused naming the key."""

from __future__ import annotations

import pytest

from enforcer.configuration import parse_config
from resource_contract.config import ConfigError


def test_dra_is_off_and_individual_by_default() -> None:
    config = parse_config({})
    assert (config.dra.enabled, config.dra.mode) == (False, "individual")
    on = parse_config({"dra": {"enabled": True, "mode": "grouped"}})
    assert (on.dra.enabled, on.dra.mode) == (True, "grouped")


@pytest.mark.parametrize(
    ("section", "key"),
    [({"mode": "mixed"}, "dra.mode"), ({"enabled": "yes"}, "dra.enabled"), ({"x": 1}, "dra.x")],
)
def test_a_bad_dra_value_names_its_key(section: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"dra": section})
    assert key in str(err.value)
