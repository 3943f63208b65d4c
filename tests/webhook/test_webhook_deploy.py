"""deploy/ and Dockerfile.webhook: rendered by kustomize, valid against the Kubernetes schemas,
and consistent with each other and with the webhook's command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.manifests import dockerfile as read_dockerfile
from tests.support.manifests import exec_form, kustomize

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMA_VERSIONS = ["1.25.0", kubernetes_validate.latest_version()]
NAMESPACE = "resource-enforcer"
OPT_OUT = ("resource-enforcer.dev/webhook", "disabled")


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    """The webhook's objects as `kubectl kustomize deploy/` renders them (the enforcer's are
    checked in tests/deploy/)."""
    ours = {(d["kind"], d["metadata"]["name"]) for d in kustomize(DEPLOY / "webhook")}
    docs = [d for d in kustomize(DEPLOY) if (d["kind"], d["metadata"]["name"]) in ours]
    assert len(docs) == len(ours), "every webhook object is in deploy/'s rendering"
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one object of each kind expected"
    return by_kind


def manifest_files() -> list[Path]:
    return sorted(p for p in (DEPLOY / "webhook").glob("*.yaml") if p.name != "kustomization.yaml")


def test_kustomize_renders_the_webhook(rendered: dict[str, dict[str, Any]]) -> None:
    assert set(rendered) == {
        "Namespace",
        "ServiceAccount",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "MutatingWebhookConfiguration",
    }


def test_the_webhook_folder_renders_alone() -> None:
    assert len(kustomize(DEPLOY / "webhook")) == len(manifest_files())


def test_kustomizations_list_plain_files() -> None:
    """Old kustomize (kubectl 1.20) takes only files in `resources:`, and nothing newer."""
    for kustomization in (DEPLOY / "kustomization.yaml", DEPLOY / "webhook" / "kustomization.yaml"):
        data = yaml.safe_load(kustomization.read_text())
        assert set(data) <= {"apiVersion", "kind", "resources"}, kustomization
        for entry in data["resources"]:
            assert (kustomization.parent / entry).is_file(), entry
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    webhook = [entry for entry in listed if entry.startswith("webhook/")]
    assert sorted(webhook) == sorted(f"webhook/{p.name}" for p in manifest_files())


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_manifest_is_valid(version: str, rendered: dict[str, dict[str, Any]]) -> None:
    docs = list(rendered.values())
    for path in manifest_files():
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_the_generated_secret_is_valid(version: str, certs: Path) -> None:
    kubernetes_validate.validate(
        yaml.safe_load((certs / "webhook-secret.yaml").read_text()), version, strict=True
    )


def test_webhook_configuration(rendered: dict[str, dict[str, Any]]) -> None:
    config = rendered["MutatingWebhookConfiguration"]
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1", "v1beta1"]
    assert hook["timeoutSeconds"] == 5
    assert hook["reinvocationPolicy"] == "IfNeeded"
    (rule,) = hook["rules"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert (rule["apiGroups"], rule["apiVersions"], rule["resources"]) == ([""], ["v1"], ["pods"])
    service = hook["clientConfig"]["service"]
    assert service == {
        "name": "resource-webhook",
        "namespace": NAMESPACE,
        "path": "/mutate",
        "port": 443,
    }
    expressions = hook["namespaceSelector"]["matchExpressions"]
    assert {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": [NAMESPACE, "kube-system"],
    } in expressions
    assert {"key": OPT_OUT[0], "operator": "NotIn", "values": [OPT_OUT[1]]} in expressions


def test_own_namespace_is_opted_out_too(rendered: dict[str, dict[str, Any]]) -> None:
    labels = rendered["Namespace"]["metadata"]["labels"]
    assert (
        labels[OPT_OUT[0]] == OPT_OUT[1] and rendered["Namespace"]["metadata"]["name"] == NAMESPACE
    )


def test_service_routes_443_to_the_pods_8443(rendered: dict[str, dict[str, Any]]) -> None:
    service, deployment = rendered["Service"], rendered["Deployment"]
    assert (
        service["metadata"]["namespace"] == NAMESPACE
        and service["metadata"]["name"] == "resource-webhook"
    )
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (443, 8443)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    pdb = rendered["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
    assert pdb.items() <= labels.items()


def _webhook_container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_deployment(rendered: dict[str, dict[str, Any]]) -> None:
    deployment = rendered["Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    c = _webhook_container(deployment)
    assert deployment["spec"]["replicas"] == 2
    assert (
        spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] > 0
    )
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(c["resources"]["requests"])
    assert c["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert c[probe]["httpGet"] == {"path": path, "port": 8443, "scheme": "HTTPS"}
    # The certificate paths given to `serve` are inside the Secret's mount.
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "resource-webhook-tls"
    args = c["args"]
    assert args[0] == "serve"
    assert args[args.index("--tls-cert") + 1] == f"{mounts['tls']}/tls.crt"
    assert args[args.index("--tls-key") + 1] == f"{mounts['tls']}/tls.key"
    assert args[args.index("--port") + 1] == "8443"
    assert args[args.index("--log-format") + 1] == "json"
    # failurePolicy Fail: an evicted webhook blocks every pod creation, so it is scheduled and
    # kept like the cluster's own add-ons, and a drain never takes both replicas.
    assert spec["priorityClassName"] == "system-cluster-critical"
    pdb = rendered["PodDisruptionBudget"]["spec"]
    assert pdb["minAvailable"] == 1 < deployment["spec"]["replicas"]


def test_the_opt_out_label_is_documented() -> None:
    docs = (ROOT / "docs" / "webhook.md").read_text()
    assert f"{OPT_OUT[0]}={OPT_OUT[1]}" in docs


# --- Dockerfile.webhook ------------------------------------------------------------------------


def dockerfile() -> dict[str, list[str]]:
    return read_dockerfile(ROOT / "Dockerfile.webhook")


def test_dockerfile_agrees_with_the_deployment(rendered: dict[str, dict[str, Any]]) -> None:
    d = dockerfile()
    deployment = rendered["Deployment"]
    c = _webhook_container(deployment)
    # The real base by default; tests/images builds on a local one through the build argument.
    # The default base is pinned (tests/deploy/test_pins.py).
    assert d["ARG"][0].startswith("BASE_IMAGE=python:3.11.") and d["FROM"] == ["${BASE_IMAGE}"]
    (user,) = d["USER"]
    uid, _, gid = user.partition(":")
    security = deployment["spec"]["template"]["spec"]["securityContext"]
    assert int(uid) == security["runAsUser"] and int(gid) == security["runAsGroup"]
    assert d["EXPOSE"] == [str(c["ports"][0]["containerPort"])]
    assert exec_form(d["ENTRYPOINT"][-1]) == c["command"]
    assert exec_form(d["CMD"][-1]) == c["args"]
    (healthcheck,) = d["HEALTHCHECK"]
    assert "https://127.0.0.1:8443/healthz" in healthcheck


def test_dockerfile_installs_only_the_webhooks_dependencies() -> None:
    run = " ".join(dockerfile()["RUN"])
    assert "pip install --no-deps ." in run
    for needed in (
        "fastapi",
        "uvicorn",
        "uvloop",
        "httptools",
        "msgspec",
        "pydantic",
        "cryptography",
        "prometheus-client",
        "PyYAML",
        "kubernetes",
    ):
        assert f'"{needed}' in run, needed
    for not_needed in ("grpcio", "protobuf", "pytest", "hypothesis"):
        assert not_needed not in run
