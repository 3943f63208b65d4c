"""docs/classes.md stays true: its examples are accepted, and give the schemata it shows."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from enforcer.configuration import parse_config
from enforcer.controllers.rdt import compute_schemata, read_resctrl_info
from tests.support.fake_resctrl import CacheShape, FakeResctrl, ResctrlShape

DOC = (Path(__file__).parents[2] / "docs" / "classes.md").read_text()


def block(start: str) -> str:
    match = re.search(rf"```yaml\n({start}:.*?)```", DOC, re.S)
    assert match, start
    return match.group(1)


def test_examples_make_one_valid_configuration(tmp_path: Path) -> None:
    data = {}
    for key in ("rdt", "blockio", "classAccess"):
        data.update(yaml.safe_load(block(key)))
    config = parse_config(data)
    assert config.class_access().allows("rdt", "gold", "prod-eu")
    assert not config.class_access().allows("rdt", "gold", "dev-team")
    # The schemata the document lists, on an 11-bit L3 with two cache ids and no MB.
    fake = FakeResctrl(tmp_path, ResctrlShape(l3=CacheShape(cbm_mask=0x7FF)))
    got = compute_schemata(config.rdt, read_resctrl_info(fake.root, options=set()))  # type: ignore[arg-type]
    listed = re.search(r"the groups get:\n\n```\n(.*?)```", DOC, re.S)
    assert listed
    shown = {line.split()[0]: line.split()[1] for line in listed.group(1).splitlines()}
    assert {name: text.strip() for name, text in got.items()} == shown
