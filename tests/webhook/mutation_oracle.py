"""The oracle of the mutation tests: the contract's class keys in their order and the
annotation a pod must get, written from the contract (docs/webhook.md, CONTRACT.md), not from
the code under test; and the webhook's patch applied to a pod."""

from __future__ import annotations

from typing import Any

import yaml
from wh_support import CONFIG_YAML, apply

from enforcer.configuration import parse_config
from resource_contract.pod_annotation import quantity_text
from resource_contract.qos import qos_class
from webhook.mutation import Policy, mutate_pod

CONFIGURED = Policy.from_config(parse_config(yaml.safe_load(CONFIG_YAML)))
OPEN = Policy()

_PREFIX = {"rdt": "rdtclass", "blockio": "blockioclass"}
_BETA = {
    "rdt": "rdt.resources.beta.kubernetes.io",
    "blockio": "blockio.resources.beta.kubernetes.io",
}


def contract_keys(kind: str, c: str) -> list[str]:
    p, beta = _PREFIX[kind], _BETA[kind]
    return [
        f"{p}.resource-enforcer.dev/container.{c}",
        f"{p}.resource-policy.nri.io/container.{c}",
        f"{p}.cri-resource-manager.intel.com/container.{c}",
        f"{beta}/container.{c}",
        f"{p}.resource-enforcer.dev/pod",
        f"{p}.resource-policy.nri.io/pod",
        f"{p}.cri-resource-manager.intel.com/pod",
        f"{beta}/pod",
    ]


def expected(p: dict[str, Any], *, configured: bool = False, namespace: str = "shop") -> dict:
    annotations = p["metadata"].get("annotations") or {}
    qos = qos_class(p["spec"])
    config_classes = {
        "rdt": {"gold", "silver", "Guaranteed", "Burstable"},
        "blockio": {"throttled", "fast"},
    }

    def entry(c: dict[str, Any]) -> dict[str, Any]:
        res = c.get("resources") or {}
        out: dict[str, Any] = {
            "requests": {k: quantity_text(v) for k, v in (res.get("requests") or {}).items()},
            "limits": {k: quantity_text(v) for k, v in (res.get("limits") or {}).items()},
        }
        classes = {}
        for kind in ("rdt", "blockio"):
            for key in contract_keys(kind, c["name"]):
                if key in annotations:
                    classes[kind] = annotations[key]
                    break
            else:
                if configured and qos in config_classes[kind]:
                    classes[kind] = qos
        if classes:
            out["classes"] = classes
        return out

    return {
        "containers": {c["name"]: entry(c) for c in p["spec"]["containers"]},
        "initContainers": {c["name"]: entry(c) for c in p["spec"].get("initContainers") or []},
    }


def run(p: dict[str, Any], policy: Policy = OPEN, namespace: str = "shop") -> dict[str, Any]:
    """The pod after the webhook's patch."""
    m = mutate_pod(p, namespace=namespace, policy=policy)
    return apply(p, m.patch)
