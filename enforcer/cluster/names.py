"""The names users write in the cluster to steer the enforcer (fixed: docs and users rely on
them)."""

from __future__ import annotations

NAME_PREFIX = "resource-enforcer-config."
DEFAULT_NAME = NAME_PREFIX + "default"
CONFIG_KEY = "config.yaml"
GROUP_LABEL = "resource-enforcer.dev/config-group"
STATUS_ANNOTATION = "resource-enforcer.dev/config-status"


def candidate_names(node: str, group: str | None) -> list[str]:
    """ConfigMap names for `node`, first match wins: the node's own, its group's, the default."""
    names = [f"{NAME_PREFIX}node.{node}"]
    if group:
        names.append(f"{NAME_PREFIX}group.{group}")
    names.append(DEFAULT_NAME)
    return names


def configmap_source(namespace: str, name: str) -> str:
    """How a ConfigMap is named in the status annotation and the logs."""
    return f"configmap/{namespace}/{name}"
