"""The Helm chart (deploy/helm/kube-resource-enforcer/): `helm lint` clean, and `helm template`
renders, for the same settings, the same objects as kustomize renders from deploy/ (relay) or
deploy/webhook + deploy/nri (NRI), so the two cannot drift apart; plus what only the chart does:
the webhook's certificate (made, given, or cert-manager's), the configuration from values,
the NRI required-plugin annotation, node paths, and clear refusals of bad values."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from enforcer.cli import parser
from tests.support.helm import CHART, HelmError, helm, render, without_helm_labels
from tests.support.manifests import kustomize

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE = {
    "relay": [REPO / "deploy"],
    "nri": [REPO / "deploy" / "webhook", REPO / "deploy" / "nri"],
}
Key = tuple[str, str]


def by_key(docs: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def pod_spec(docs: dict[Key, dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = docs[(kind, name)]["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"mode": "nri", "enforcer.nri.requiredPlugin": "true"},
        {"certificates.source": "cert-manager", "webhook.checkConfig": "true"},
        {"enforcer.clusterConfig": "false", "namespace.create": "true"},
    ],
    ids=["defaults", "nri-required", "cert-manager", "file-config"],
)
def test_helm_lint_is_clean(values: dict[str, str]) -> None:
    out = helm("lint", "--strict", str(CHART), *[f"--set={k}={v}" for k, v in values.items()])
    assert "1 chart(s) linted, 0 chart(s) failed" in out, out


@pytest.mark.parametrize("mode", ["relay", "nri"])
def test_the_same_objects_as_kustomize(mode: str) -> None:
    """Everything kustomize renders, the chart renders identically (Helm's labels aside); the
    chart adds only the certificate Secret and the caBundle that deploy/ leaves to the operator."""
    ours = by_key(render({"mode": mode, "namespace.create": "true"}))
    theirs: dict[Key, dict[str, Any]] = {}
    for folder in KUSTOMIZE[mode]:
        theirs.update(by_key(kustomize(folder)))
    assert set(ours) - set(theirs) == {("Secret", "resource-webhook-tls")}
    assert set(theirs) - set(ours) == set()
    hook = ours[("MutatingWebhookConfiguration", "resource-enforcer")]
    base64.b64decode(hook["webhooks"][0]["clientConfig"].pop("caBundle"), validate=True)
    for key, doc in theirs.items():
        assert without_helm_labels(ours[key]) == doc, key
        assert ours[key]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", key


@pytest.mark.parametrize("mode", ["relay", "nri"])
def test_every_object_is_valid_against_the_kubernetes_schema(mode: str) -> None:
    for doc in render({"mode": mode, "namespace.create": "true", "webhook.checkConfig": "true"}):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_a_made_certificate_is_signed_by_the_ca_in_the_bundle_for_the_service() -> None:
    docs = by_key(render(namespace="kre-system"))
    secret = docs[("Secret", "resource-webhook-tls")]
    assert secret["type"] == "kubernetes.io/tls"
    hook = docs[("MutatingWebhookConfiguration", "resource-enforcer")]["webhooks"][0]
    bundle = base64.b64decode(hook["clientConfig"]["caBundle"])
    assert base64.b64decode(secret["data"]["ca.crt"]) == bundle
    ca = x509.load_pem_x509_certificate(bundle)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "resource-webhook.kre-system.svc" in names.get_values_for_type(x509.DNSName)
    assert hook["clientConfig"]["service"] == {
        "name": "resource-webhook",
        "namespace": "kre-system",
        "path": "/mutate",
        "port": 443,
    }
    # The release's own namespace is never sent to the webhook, whatever its name.
    expr = hook["namespaceSelector"]["matchExpressions"][0]
    assert expr["values"] == ["kre-system", "kube-system"]


def test_given_certificates_are_used_as_given(tmp_path: Path) -> None:
    from webhook.certs import write_certs  # the same files `resource-webhook certs` writes

    write_certs("resource-webhook", "resource-enforcer", tmp_path)
    values = {
        "certificates": {
            "source": "provided",
            "provided": {
                "caCert": (tmp_path / "ca.crt").read_text(),
                "tlsCert": (tmp_path / "tls.crt").read_text(),
                "tlsKey": (tmp_path / "tls.key").read_text(),
            },
        }
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    docs = by_key(render(values_file=tmp_path / "values.yaml"))
    data = docs[("Secret", "resource-webhook-tls")]["data"]
    assert base64.b64decode(data["tls.crt"]).decode() == (tmp_path / "tls.crt").read_text()
    assert base64.b64decode(data["tls.key"]).decode() == (tmp_path / "tls.key").read_text()
    hook = docs[("MutatingWebhookConfiguration", "resource-enforcer")]["webhooks"][0]
    assert hook["clientConfig"]["caBundle"] == (tmp_path / "ca-bundle.b64").read_text().strip()


def test_cert_manager_makes_the_secret_and_injects_the_ca() -> None:
    docs = by_key(render({"certificates.source": "cert-manager"}))
    assert ("Secret", "resource-webhook-tls") not in docs
    cert = docs[("Certificate", "resource-webhook")]["spec"]
    assert cert["secretName"] == "resource-webhook-tls"
    assert "resource-webhook.resource-enforcer.svc" in cert["dnsNames"]
    assert cert["issuerRef"] == {"name": "resource-webhook-ca", "kind": "Issuer"}
    assert docs[("Issuer", "resource-webhook-ca")]["spec"] == {
        "ca": {"secretName": "resource-webhook-ca"}
    }
    hook = docs[("MutatingWebhookConfiguration", "resource-enforcer")]
    assert hook["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "resource-enforcer/resource-webhook"
    }
    assert "caBundle" not in hook["webhooks"][0]["clientConfig"]
    # An issuer of the operator's own: the chart makes no CA.
    docs = by_key(
        render(
            {
                "certificates.source": "cert-manager",
                "certificates.certManager.issuerRef.name": "corp-ca",
                "certificates.certManager.issuerRef.kind": "ClusterIssuer",
            }
        )
    )
    assert {k for k in docs if k[0] in ("Issuer", "Certificate")} == {
        ("Certificate", "resource-webhook")
    }
    assert docs[("Certificate", "resource-webhook")]["spec"]["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
    }


def test_the_configuration_comes_from_values(tmp_path: Path) -> None:
    config = {
        "policy": {"name": "static", "reservedCPUs": "0"},
        "classAccess": {"rdt": {"gold": ["prod-*"]}},
    }
    values = {
        "config": config,
        "groupConfigs": {"gpu": {"policy": {"name": "topology-aware", "reservedCPUs": 2}}},
        "nodeConfigs": {"node-7": {"policy": {"name": "none"}}},
        "webhook": {"checkConfig": True},
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    docs = by_key(render(values_file=tmp_path / "values.yaml"))

    def conf(name: str) -> Any:
        return yaml.safe_load(docs[("ConfigMap", name)]["data"]["config.yaml"])

    assert conf("resource-enforcer-config.default") == config
    assert conf("resource-enforcer-config.group.gpu") == values["groupConfigs"]["gpu"]  # type: ignore[index]
    assert conf("resource-enforcer-config.node.node-7") == {"policy": {"name": "none"}}
    # The webhook checks classes against the same file, and restarts when it changes.
    spec = pod_spec(docs, "Deployment", "resource-webhook")
    args = spec["containers"][0]["args"]
    assert args[args.index("--config") + 1] == "/etc/resource-enforcer/config.yaml"
    assert {"name": "config", "configMap": {"name": "resource-enforcer-config.default"}} in spec[
        "volumes"
    ]
    tmpl = docs[("Deployment", "resource-webhook")]["spec"]["template"]["metadata"]
    changed = by_key(render({"webhook.checkConfig": "true", "config.policy.name": "static"}))
    other = changed[("Deployment", "resource-webhook")]["spec"]["template"]["metadata"]
    assert tmpl["annotations"]["checksum/config"] != other["annotations"]["checksum/config"]


@pytest.mark.parametrize("mode", ["relay", "nri"])
def test_node_paths_are_passed_and_mounted_at_the_same_path(mode: str) -> None:
    paths = {
        "enforcer.paths.runtimeSocket": "/srv/ctd/run/containerd.sock",
        "enforcer.paths.relaySocket": "/srv/kre/relay/cri.sock",
        "enforcer.paths.nriSocket": "/srv/ctd/nri/nri.sock",
        "enforcer.paths.stateDir": "/srv/kre/state",
    }
    docs = by_key(render({"mode": mode, **paths}))
    spec = pod_spec(docs, "DaemonSet", "resource-enforcer")
    (container,) = spec["containers"]
    args = parser().parse_args([a.replace("$(POD_IP)", "10.0.0.7") for a in container["args"]])
    assert args.command == ("run" if mode == "relay" else "nri")
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounted = {
        m["mountPath"]: host[m["name"]] for m in container["volumeMounts"] if m["name"] in host
    }
    used = [args.state_dir]
    if mode == "relay":
        used += [args.runtime_socket, args.relay_socket]
    else:
        used += [args.nri_socket]
    for path in used:
        folder = path if path == args.state_dir else str(Path(path).parent)
        assert mounted.get(folder) == folder, (path, mounted)


def test_the_nri_required_plugin_annotation() -> None:
    def annotations(values: dict[str, str]) -> dict[str, str]:
        docs = by_key(render(values))
        tmpl = docs[("DaemonSet", "resource-enforcer")]["spec"]["template"]["metadata"]
        return dict(tmpl["annotations"])

    key = "tolerate-missing-nri-plugins.noderesource.dev"
    assert annotations({"mode": "nri", "enforcer.nri.requiredPlugin": "true"})[key] == "true"
    assert annotations({"mode": "nri"})[key] == "true"  # as deploy/nri: the plugin's own pod
    assert key not in annotations({"mode": "relay"})
    notes = helm(
        "install",
        "kre",
        str(CHART),
        "--dry-run=client",
        "--namespace=resource-enforcer",
        "--set=mode=nri",
        "--set=enforcer.nri.requiredPlugin=true",
    )
    assert 'required_plugins = ["resource-enforcer"]' in notes


def test_a_file_configuration_instead_of_the_cluster_one() -> None:
    docs = by_key(render({"enforcer.clusterConfig": "false"}))
    spec = pod_spec(docs, "DaemonSet", "resource-enforcer")
    (container,) = spec["containers"]
    args = parser().parse_args([a.replace("$(POD_IP)", "10.0.0.7") for a in container["args"]])
    assert (args.cluster_config, args.config) == ("off", "/etc/resource-enforcer/config.yaml")
    assert {"name": "config", "mountPath": "/etc/resource-enforcer", "readOnly": True} in container[
        "volumeMounts"
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "cri"}, 'mode: must be relay or nri, not "cri"'),
        ({"certificates.source": "vault"}, "certificates.source: must be generate, provided"),
        ({"certificates.source": "provided"}, "certificates.provided.caCert: PEM text is needed"),
        (
            {"enforcer.nri.pluginIndex": "7"},
            'enforcer.nri.pluginIndex: two digits (00-99), not "7"',
        ),
        (
            {"webhook.failurePolicy": "Open"},
            'webhook.failurePolicy: must be Fail or Ignore, not "Open"',
        ),
        ({"config": "policy"}, "config: must be a map"),
    ],
)
def test_bad_values_are_refused_naming_the_key(values: dict[str, str], message: str) -> None:
    with pytest.raises(HelmError) as e:
        render(values)
    assert message in e.value.stderr
    assert "goroutine" not in e.value.stderr


def test_the_dra_device_class_is_deploy_dra_s_when_asked_for() -> None:
    """deploy/dra/'s DeviceClass, rendered only with dra.deviceClass (Kubernetes 1.34+)."""
    key = ("DeviceClass", "cpu.resource-enforcer.dev")
    assert key not in by_key(render({}))
    ours = by_key(render({"dra.deviceClass": "true"}))[key]
    (theirs,) = kustomize(Path(__file__).parents[2] / "deploy" / "dra")
    assert without_helm_labels(ours) == theirs
