"""deploy/optional/: the webhook's NetworkPolicy and the enforcer's ValidatingAdmissionPolicy.

Rendered by kustomize, valid against the Kubernetes schemas, consistent with the objects they
guard (labels, ports, the service account, the annotation the enforcer writes). The policy's
CEL expressions are compiled and evaluated with cel-python on what the API server would hand
them: the Node before and after the enforcer's own patch (sent by the enforcer's real reporter
through the real `kubernetes` client, to the test API server), and the changes it must refuse.
"""

from __future__ import annotations

import copy
import ipaddress
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from kubernetes import client as k8s

from enforcer.cluster import STATUS_ANNOTATION
from enforcer.cluster.client import make_api_client
from enforcer.cluster.node_status import ConfigStatus, NodeReporter
from tests.support.fake_apiserver import FakeAPIServer
from tests.support.manifests import kustomize

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NETPOL = DEPLOY / "optional" / "webhook-networkpolicy"
NODE_POLICY = DEPLOY / "optional" / "enforcer-node-policy"
# admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy is GA from 1.30.
SCHEMA_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


@pytest.fixture(scope="module")
def main_objects() -> list[dict[str, Any]]:
    return kustomize(DEPLOY)


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


# --- both folders --------------------------------------------------------------------------------


@pytest.mark.parametrize("folder", [NETPOL, NODE_POLICY], ids=lambda p: p.name)
def test_renders_alone_with_plain_file_lists(folder: Path) -> None:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources"}  # old kustomize too
    files = sorted(p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files
    assert len(kustomize(folder)) == len(files)


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("folder", [NETPOL, NODE_POLICY], ids=lambda p: p.name)
def test_valid_against_the_schemas(folder: Path, version: str) -> None:
    for doc in kustomize(folder):
        kubernetes_validate.validate(doc, version, strict=True)


def test_optional_parts_are_not_applied_by_default(main_objects: list[dict[str, Any]]) -> None:
    kinds = {d["kind"] for d in main_objects}
    assert not kinds & {"NetworkPolicy", "ValidatingAdmissionPolicy"}
    install = (ROOT / "docs" / "install.md").read_text()
    assert "kubectl apply -k deploy/optional/webhook-networkpolicy/" in install
    assert "kubectl apply -k deploy/optional/enforcer-node-policy/" in install


# --- the NetworkPolicy ---------------------------------------------------------------------------


def test_network_policy_admits_only_listed_addresses_to_the_webhook_port(
    main_objects: list[dict[str, Any]],
) -> None:
    (policy,) = kustomize(NETPOL)
    deployment = find(main_objects, "Deployment", "resource-webhook")
    service = find(main_objects, "Service", "resource-webhook")
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector and selector.items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (port,) = container["ports"]
    assert rule["ports"] == [{"protocol": "TCP", "port": port["containerPort"]}]
    assert service["spec"]["ports"][0]["targetPort"] == port["containerPort"]
    # An empty or missing `from` admits everyone: every peer is an address block, no wider
    # than a host, with nothing carved out.
    assert rule["from"]
    for peer in rule["from"]:
        assert set(peer) == {"ipBlock"} and set(peer["ipBlock"]) == {"cidr"}
        net = ipaddress.ip_network(peer["ipBlock"]["cidr"])
        assert net.prefixlen == net.max_prefixlen, net


# --- the ValidatingAdmissionPolicy ---------------------------------------------------------------


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    docs = by_kind(kustomize(NODE_POLICY))
    binding = docs["ValidatingAdmissionPolicyBinding"]
    policy = docs["ValidatingAdmissionPolicy"]
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    return policy


def test_policy_matches_the_enforcers_account_and_annotation(
    policy: dict[str, Any], main_objects: list[dict[str, Any]]
) -> None:
    account = find(main_objects, "ServiceAccount", "resource-enforcer")
    username = (
        f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"
    )
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"].strip() == f'request.userInfo.username == "{username}"'
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert evaluate(variables["ownKeys"], {}) == [STATUS_ANNOTATION]
    # Every verb the enforcer has on Nodes is one the policy sees.
    role = find(main_objects, "ClusterRole", "resource-enforcer")
    writes = {v for r in role["rules"] if "nodes" in r["resources"] for v in r["verbs"]} - {"get"}
    assert writes == {"patch"}  # a patch is an UPDATE at admission
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["nodes"] and rule["operations"] == ["UPDATE"]
    assert policy["spec"]["failurePolicy"] == "Fail"


_ENV = celpy.Environment()
FIELDS_KEPT = "the enforcer may not change a Node's spec, labels, finalizers or owners"
ANNOTATIONS_ONLY = (
    "the enforcer may change only its own annotations (resource-enforcer.dev/config-status)"
)


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    program = _ENV.program(_ENV.compile(expression))
    return program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})


def admits(policy: dict[str, Any], request: dict[str, Any], old: Any, new: Any) -> list[str]:
    """The messages of the validations that fail (empty: admitted), as the API server evaluates
    them: matchConditions first (not matched: admitted), then the variables, then each rule."""
    env: dict[str, Any] = {"request": request, "oldObject": old, "object": new}
    for condition in policy["spec"]["matchConditions"]:
        if not evaluate(condition["expression"], env):
            return []
    variables: dict[str, Any] = {}
    for variable in policy["spec"]["variables"]:
        variables[variable["name"]] = _plain(
            evaluate(variable["expression"], {**env, "variables": variables})
        )
    failed = []
    for rule in policy["spec"]["validations"]:
        if not evaluate(rule["expression"], {**env, "variables": variables}):
            failed.append(rule["message"])
    return failed


def _plain(value: Any) -> Any:
    """A CEL value back to JSON-like Python (for the next expressions' activation)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    return value


def user(
    node: str | None, username: str = "system:serviceaccount:resource-enforcer:resource-enforcer"
) -> dict[str, Any]:
    """userInfo as the API server fills it for a pod-bound service account token (1.30+)."""
    extra = {
        "authentication.kubernetes.io/credential-id": ["JTI=0b7c4d2e-5f1a-4e8b-9c3d-2a1b0c9d8e7f"],
        "authentication.kubernetes.io/pod-name": ["resource-enforcer-x7k2p"],
        "authentication.kubernetes.io/pod-uid": ["6f1e2d3c-4b5a-4968-8776-65a4b3c2d1e0"],
    }
    if node is not None:
        extra["authentication.kubernetes.io/node-name"] = [node]
        extra["authentication.kubernetes.io/node-uid"] = ["a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"]
    return {
        "uid": "7e3d1c2b-0a9f-4e8d-b7c6-5a4f3e2d1c0b",
        "username": username,
        "groups": [
            "system:serviceaccounts",
            "system:serviceaccounts:resource-enforcer",
            "system:authenticated",
        ],
        "extra": extra,
    }


def request_for(info: dict[str, Any], node: str) -> dict[str, Any]:
    return {
        "uid": "0f9e8d7c-6b5a-4938-a716-5f4e3d2c1b0a",
        "kind": {"group": "", "version": "v1", "kind": "Node"},
        "resource": {"group": "", "version": "v1", "resource": "nodes"},
        "name": node,
        "operation": "UPDATE",
        "userInfo": info,
        "dryRun": False,
    }


@pytest.fixture
def patched(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Node before and after the enforcer's own status patch: the enforcer's reporter, the
    real `kubernetes` client, the test API server's merge-patch."""
    with FakeAPIServer() as api:
        api.put_node(
            "node-a",
            labels={
                "kubernetes.io/hostname": "node-a",
                "resource-enforcer.dev/config-group": "gpu",
            },
        )
        with api.lock:  # what a kubelet-registered Node carries besides
            node = api.nodes["node-a"]
            node["metadata"]["annotations"] = {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            }
            node["spec"] = {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}
            before = copy.deepcopy(node)
        core = k8s.CoreV1Api(make_api_client(api.kubeconfig(tmp_path / "kubeconfig")))
        reporter = NodeReporter(core, "node-a", "resource-enforcer")
        reporter.report(
            ConfigStatus(
                "configmap/resource-enforcer/resource-enforcer-config.gpu",
                "42",
                True,
                [],
                "configmap/resource-enforcer/resource-enforcer-config.gpu",
            )
        )
        reporter.flush(timeout=10)
        with api.lock:
            after = copy.deepcopy(api.nodes["node-a"])
    assert STATUS_ANNOTATION in after["metadata"]["annotations"]
    return before, after


def test_cel_expressions_compile(policy: dict[str, Any]) -> None:
    spec = policy["spec"]
    expressions = [c["expression"] for c in spec["matchConditions"]]
    expressions += [v["expression"] for v in spec["variables"]]
    expressions += [v["expression"] for v in spec["validations"]]
    assert len(expressions) == 7
    for expression in expressions:
        _ENV.compile(expression)  # CELParseError on a syntax error


def test_the_enforcers_own_patch_of_its_own_node_is_admitted(
    policy: dict[str, Any], patched: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    before, after = patched
    assert admits(policy, request_for(user("node-a"), "node-a"), before, after) == []


def test_another_nodes_patch_is_denied(
    policy: dict[str, Any], patched: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    before, after = patched
    assert admits(policy, request_for(user("node-b"), "node-a"), before, after) == [
        "the enforcer may change only the Node its pod runs on"
    ]
    # A token that is not bound to a pod on a node (an older API server, a legacy token).
    assert admits(policy, request_for(user(None), "node-a"), before, after) == [
        "the enforcer may change only the Node its pod runs on"
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda n: n["metadata"]["labels"].update({"node-role.kubernetes.io/control-plane": ""}),
            FIELDS_KEPT,
        ),
        (
            lambda n: n["spec"].update({"unschedulable": True}),
            FIELDS_KEPT,
        ),
        (
            lambda n: n["spec"].update({"taints": [{"key": "k", "effect": "NoSchedule"}]}),
            FIELDS_KEPT,
        ),
        (
            lambda n: n["metadata"].update({"finalizers": ["example.com/hold"]}),
            FIELDS_KEPT,
        ),
        (
            lambda n: n["metadata"]["annotations"].update({"node.alpha.kubernetes.io/ttl": "30"}),
            ANNOTATIONS_ONLY,
        ),
        (
            lambda n: n["metadata"]["annotations"].pop("node.alpha.kubernetes.io/ttl"),
            ANNOTATIONS_ONLY,
        ),
        (
            lambda n: n["metadata"]["annotations"].update({"resource-enforcer.dev/other": "x"}),
            ANNOTATIONS_ONLY,
        ),
    ],
    ids=[
        "label",
        "unschedulable",
        "taint",
        "finalizer",
        "annotation",
        "annotation-removed",
        "other-key",
    ],
)
def test_changes_beyond_the_status_annotation_are_denied(
    policy: dict[str, Any],
    patched: tuple[dict[str, Any], dict[str, Any]],
    change: Any,
    message: str,
) -> None:
    before, after = patched
    changed = copy.deepcopy(after)
    change(changed)
    assert admits(policy, request_for(user("node-a"), "node-a"), before, changed) == [message]


def test_other_users_are_not_matched(
    policy: dict[str, Any], patched: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    before, after = patched
    changed = copy.deepcopy(after)
    changed["spec"]["unschedulable"] = True  # kubectl cordon by an administrator
    kubelet = user(None, username="system:node:node-b")
    assert admits(policy, request_for(kubelet, "node-a"), before, changed) == []
