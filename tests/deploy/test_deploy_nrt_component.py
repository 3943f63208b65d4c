"""deploy/components/node-resource-topology: an optional kustomize component that adds the
NodeResourceTopology CRD and the enforcer's RBAC for it, rendered the way an operator uses it
(an overlay of deploy/ with the component) and valid against the Kubernetes schemas."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.manifests import kustomize

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPONENT = DEPLOY / "components" / "node-resource-topology"
NAME = "resource-enforcer-node-resource-topology"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    overlay = tmp_path_factory.mktemp("overlay")
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY, overlay)],
                "components": [os.path.relpath(COMPONENT, overlay)],
            }
        )
    )
    return kustomize(overlay)


def by_kind(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_the_component_adds_the_crd_and_rbac_to_deploy(rendered: list[dict[str, Any]]) -> None:
    base = kustomize(DEPLOY)
    added = [d for d in rendered if d not in base]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in added) == [
        ("ClusterRole", NAME),
        ("ClusterRoleBinding", NAME),
        ("CustomResourceDefinition", "noderesourcetopologies.topology.node.k8s.io"),
    ]
    assert len(rendered) == len(base) + 3  # nothing of deploy/ changed or lost


def test_the_crd_is_the_vendored_upstream_one(rendered: list[dict[str, Any]]) -> None:
    crd = by_kind(
        rendered, "CustomResourceDefinition", "noderesourcetopologies.topology.node.k8s.io"
    )
    assert crd == yaml.safe_load((COMPONENT / "crd.yaml").read_text())
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert versions["v1alpha2"]["served"] and versions["v1alpha2"]["storage"]
    assert crd["spec"]["scope"] == "Cluster"
    header = (COMPONENT / "crd.yaml").read_text().splitlines()[:3]
    assert "k8stopologyawareschedwg/noderesourcetopology-api" in " ".join(header)


def test_rbac_lets_the_enforcers_service_account_write_its_objects(
    rendered: list[dict[str, Any]],
) -> None:
    role = by_kind(rendered, "ClusterRole", NAME)
    assert role["rules"] == [
        {
            "apiGroups": ["topology.node.k8s.io"],
            "resources": ["noderesourcetopologies"],
            "verbs": ["get", "create", "update", "delete"],
        }
    ]
    binding = by_kind(rendered, "ClusterRoleBinding", NAME)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": NAME,
    }
    (subject,) = binding["subjects"]
    account = by_kind(rendered, "ServiceAccount", subject["name"])
    assert subject["namespace"] == account["metadata"]["namespace"]
    daemonset = by_kind(rendered, "DaemonSet", "resource-enforcer")
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == subject["name"]
    # The Node, to own the object: the base ClusterRole already reads it.
    base_role = by_kind(rendered, "ClusterRole", "resource-enforcer")
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]} in base_role[
        "rules"
    ]


@pytest.mark.parametrize("version", ["1.25.0", kubernetes_validate.latest_version()])
def test_the_components_objects_are_valid(version: str, rendered: list[dict[str, Any]]) -> None:
    for name in ("crd.yaml", "clusterrole.yaml", "clusterrolebinding.yaml"):
        for doc in yaml.safe_load_all((COMPONENT / name).read_text()):
            kubernetes_validate.validate(doc, version, strict=True)
