"""Annotation keys of the contract, in the order they are read."""

DOMAIN = "resource-enforcer.dev"

# The annotation the webhook writes, then compatible ones from other webhooks (same shape,
# no `classes`), in the order the enforcer trusts them.
RESOURCES_KEY = f"{DOMAIN}/resources"
RESOURCES_KEYS: tuple[str, ...] = (
    RESOURCES_KEY,
    "noderesource.dev/resources",
    "intel.com/resources",
)

# Domains of the peers whose per-container and per-pod keys we honour after our own.
PEER_DOMAINS: tuple[str, ...] = ("resource-policy.nri.io", "cri-resource-manager.intel.com")


def container_key(prefix: str, domain: str, container: str) -> str:
    return f"{prefix}.{domain}/container.{container}"


def pod_key(prefix: str, domain: str) -> str:
    return f"{prefix}.{domain}/pod"
