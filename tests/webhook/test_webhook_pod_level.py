"""Pods with pod-level resources (`spec.resources`) through the real webhook over TLS.

The server is started with its console script (conftest.py); the pods of the QoS table
(tests/unit/test_pod_level_qos.py: Kubernetes 1.37's rules, each row says why) are posted as
the API server posts them. The annotation must carry `spec.resources` under `pod`, exactly as
written, and absent without pod-level resources; the QoS-named default class (the server's
configuration has `Guaranteed` and `Burstable` RDT classes) must follow Kubernetes' class.
"""

from __future__ import annotations

import json

import httpx
import pytest
from wh_support import apply, body, container, decode_patch, patched_annotation, pod, review

from tests.unit.test_pod_level_qos import TABLE

QOS_CLASSES = {"Guaranteed": "Guaranteed", "Burstable": "Burstable", "BestEffort": None}


def table_pod(resources: dict | None, containers: list, init: list) -> dict:
    def make(c: dict) -> dict:
        res = c.get("resources") or {}
        extra = {k: v for k, v in c.items() if k not in ("name", "resources")}
        return container(c["name"], res.get("requests"), res.get("limits"), **extra)

    p = pod([make(c) for c in containers], init_containers=[make(c) for c in init] or None)
    if resources is not None:
        p["spec"]["resources"] = json.loads(json.dumps(resources))
    return p


@pytest.mark.parametrize(
    ("resources", "containers", "init", "qos"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE]
)
def test_the_pod_key_and_the_qos_class_over_tls(
    client: httpx.Client, resources: dict | None, containers: list, init: list, qos: str
) -> None:
    p = table_pod(resources, containers, init)
    out = client.post("/mutate", content=body(review(p))).json()
    assert out["response"]["allowed"] is True, out
    value = patched_annotation(p, out)
    if resources and (resources.get("requests") or resources.get("limits")):
        assert value["pod"] == {
            "requests": resources.get("requests", {}),
            "limits": resources.get("limits", {}),
        }
    else:
        assert "pod" not in value
    wanted = QOS_CLASSES[qos]
    for name in [c["name"] for c in containers]:
        classes = value["containers"][name].get("classes", {})
        assert classes.get("rdt") == wanted, (name, value)


def test_a_guaranteed_pod_level_budget_is_not_called_best_effort(
    client: httpx.Client, plain_client: httpx.Client
) -> None:
    """issue 28, 4: requests == limits at pod level, containers without resources."""
    budget = {"cpu": "2", "memory": "1Gi"}
    p = pod([container("app"), container("sidecar")])
    p["spec"]["resources"] = {"requests": budget, "limits": budget}
    value = patched_annotation(p, client.post("/mutate", content=body(review(p))).json())
    assert value["containers"]["app"]["classes"] == {"rdt": "Guaranteed"}
    assert value["pod"] == {"requests": budget, "limits": budget}
    # Without --config: no QoS default, the pod key all the same.
    plain = patched_annotation(p, plain_client.post("/mutate", content=body(review(p))).json())
    assert "classes" not in plain["containers"]["app"]
    assert plain["pod"] == value["pod"]
    # A second pass over the pod it produced changes nothing (reinvocationPolicy: IfNeeded).
    again = apply(p, decode_patch(client.post("/mutate", content=body(review(p))).json()))
    out = client.post("/mutate", content=body(review(again))).json()
    assert out["response"]["allowed"] is True and "patch" not in out["response"]


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"requests": {"cpu": "-1"}}, 'spec.resources.requests.cpu: "-1" must not be negative'),
        (
            {"limits": {"memory": "lots"}},
            'spec.resources.limits.memory: "lots" is not a valid quantity',
        ),
    ],
)
def test_a_bad_pod_level_quantity_is_denied_naming_the_field(
    client: httpx.Client, resources: dict, message: str
) -> None:
    p = pod([container("app")])
    p["spec"]["resources"] = resources
    out = client.post("/mutate", content=body(review(p))).json()["response"]
    assert out["allowed"] is False
    assert out["status"]["code"] == 400
    assert out["status"]["message"] == message
