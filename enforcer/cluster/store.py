"""The last configuration the cluster gave and this node applied, kept in the state folder.

At start-up the enforcer takes it before the API server has answered (or when it never does),
so a node restarted while the control plane is away runs with what the cluster last said.
Replaced atomically, like the state file: a crash leaves the old or the new one, never half.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from resource_contract.bounded import Limits, load_json
from resource_files.safe_files import read_file, sync_dir, write_file

log = logging.getLogger(__name__)

LAST_GOOD_FILE = "config.last-good.json"


@dataclass(frozen=True)
class StoredConfig:
    source: str  # configmap/<namespace>/<name>
    resource_version: str
    text: str  # the ConfigMap's config.yaml, as it was applied


# A ConfigMap's text (at most 1 MiB, JSON-escaped) and three short fields, one level deep.
STORED_LIMITS = Limits(max_bytes=8 << 20, max_depth=8)


class LastGoodStore:
    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / LAST_GOOD_FILE

    def load(self) -> StoredConfig | None:
        try:
            raw = read_file(self.path)  # a link planted there is not followed
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.error("cannot read %s: %s", self.path, exc.strerror)
            return None
        try:
            data = load_json(raw, STORED_LIMITS)  # BoundError is a ValueError
            stored = StoredConfig(
                source=str(data["source"]),
                resource_version=str(data["resourceVersion"]),
                text=str(data["config"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            log.error("%s is unreadable (%s); not using it", self.path, exc)
            return None
        return stored

    def save(self, stored: StoredConfig) -> None:
        payload = json.dumps(
            {
                "source": stored.source,
                "resourceVersion": stored.resource_version,
                "config": stored.text,
                "stored": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            indent=1,
        ).encode()
        # O_EXCL|O_NOFOLLOW temporary file, mode 0600, renamed over; a planted link is refused.
        write_file(self.path, payload, mode=0o600)

    def clear(self) -> None:
        """The cluster holds no configuration for this node any more: forget the stored one."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return
        self._sync_dir()

    def _sync_dir(self) -> None:
        sync_dir(self.path.parent)
