"""Cluster-driven configuration: ConfigMaps chosen per node, watched, applied live, with the
outcome reported on the Node (see docs/enforcer.md, "Configuration from the cluster").

Everything here that talks to the API server runs in its own thread with the synchronous
`kubernetes` client, imported there: the relay never waits for it, not even at start-up.
"""

from enforcer.cluster.names import (
    CONFIG_KEY,
    GROUP_LABEL,
    NAME_PREFIX,
    STATUS_ANNOTATION,
    candidate_names,
)
from enforcer.cluster.store import LastGoodStore, StoredConfig

__all__ = [
    "CONFIG_KEY",
    "GROUP_LABEL",
    "NAME_PREFIX",
    "STATUS_ANNOTATION",
    "LastGoodStore",
    "StoredConfig",
    "candidate_names",
]
