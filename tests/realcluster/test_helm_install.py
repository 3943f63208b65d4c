"""The Helm chart (deploy/helm/kube-resource-enforcer/) installed on the real cluster, once, in
NRI mode: the bed's kustomize deployment is taken away, `helm install --wait` puts the webhook
and the enforcer back from the chart (its own certificate, the static policy from values), and
they serve: the API server calls the webhook through the chart's caBundle, and a Guaranteed
pod gets its exclusive CPU, read from the pod's cgroup and containerd's spec. Afterwards
`helm uninstall` and the kustomize deployment again, so the other modules find the bed as it
was."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from enforcer.topology import CPUSet
from tests.support.cluster import deploy, truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.helm import CHART, helm

NS = "helm-chart"
RELEASE = "kre"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.parse("0")

# The chart is installed once (the brief of issue 26: "installed on the real cluster once"):
# in NRI mode, whose enforcer can be swapped without moving kubelet.
pytestmark = pytest.mark.parametrize("cluster", ["nri"], indirect=True)


def helm_on(cluster: Cluster, *args: str, timeout: float = 400) -> str:
    return helm(*args, f"--kubeconfig={cluster.lay.kubeconfig}", timeout=timeout)


@pytest.fixture(scope="module")
def charted(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if len(ALL) != 2:
        pytest.fail(f"these tests are written for the 2-CPU test machine, not {ALL}")
    deploy.undeploy(cluster.lay, cluster.kubectl)
    values = deploy.helm_values(cluster.lay, cluster.mode)
    values["config"] = yaml.safe_load(w.STATIC_CONFIG)
    values["webhook"] = {"replicas": 1}
    vfile = tmp_path_factory.mktemp("helm") / "values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    try:
        helm_on(
            cluster,
            "install",
            RELEASE,
            str(CHART),
            f"--namespace={w.ENFORCER_NS}",
            "--create-namespace",
            f"--values={vfile}",
            "--wait",
            "--timeout=5m",
        )
        cluster.wait_programs()
        yield cluster
    finally:
        w.delete_namespace(cluster.kubectl, NS)
        helm_on(cluster, "uninstall", RELEASE, f"--namespace={w.ENFORCER_NS}", "--wait")
        w.delete_namespace(cluster.kubectl, w.ENFORCER_NS)
        webhook_cli = Path(sys.executable).parent / "resource-webhook"
        deploy.deploy(cluster.lay, cluster.kubectl, cluster.mode, webhook_cli)
        cluster.wait_programs()


def test_the_release_is_deployed_with_the_chart_objects(charted: Cluster) -> None:
    status = json.loads(
        helm_on(charted, "status", RELEASE, f"--namespace={w.ENFORCER_NS}", "--output=json")
    )
    assert status["info"]["status"] == "deployed"
    ds = charted.kubectl.json("-n", w.ENFORCER_NS, "get", "daemonset", "resource-enforcer")
    assert ds["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert ds["spec"]["template"]["spec"]["containers"][0]["args"][0] == "nri"


def test_a_guaranteed_pod_gets_its_exclusive_cpu(charted: Cluster) -> None:
    # The chart's default ConfigMap (the static policy from values) is the one in force.
    deadline = time.monotonic() + 90
    while "resource-enforcer-config.default" not in str(
        w.node_status(charted.kubectl).get("inForce", "")
    ):
        assert time.monotonic() < deadline, w.node_status(charted.kubectl)
        time.sleep(1)
    pods = [
        w.pod("exclusive", NS, w.container("app", w.guaranteed("1"))),
        w.pod("shared", NS, w.container("app", w.burstable())),
    ]
    charted.kubectl.apply(w.dump(w.namespace(NS), *pods))
    for p in pods:
        stored = w.wait_pod_running(charted.kubectl, NS, p["metadata"]["name"])
        # Admitted through the chart's webhook and certificate: the annotation is there.
        assert "resource-enforcer.dev/resources" in stored["metadata"]["annotations"]
    (c,) = truth.containers_of(charted.kubectl, NS, "exclusive")
    assert c.qos == "Guaranteed" and CPUSet.parse(c.cpus) == ALL - RESERVED
    spec_cpus = truth.runtime_cpus(charted.lay, c.container_id)
    assert CPUSet.parse(spec_cpus) == ALL - RESERVED
    (s,) = truth.containers_of(charted.kubectl, NS, "shared")
    assert CPUSet.parse(s.cpus) == RESERVED


def test_an_upgrade_keeps_the_made_certificate(charted: Cluster) -> None:
    def tls() -> tuple[dict[str, str], str, int]:
        secret = charted.kubectl.json("-n", w.ENFORCER_NS, "get", "secret", "resource-webhook-tls")
        hook = charted.kubectl.json("get", "mutatingwebhookconfiguration", "resource-enforcer")
        first = hook["webhooks"][0]
        return secret["data"], first["clientConfig"]["caBundle"], first["timeoutSeconds"]

    data, bundle, _ = tls()
    helm_on(
        charted,
        "upgrade",
        RELEASE,
        str(CHART),
        f"--namespace={w.ENFORCER_NS}",
        "--reuse-values",
        "--set=webhook.timeoutSeconds=6",
        "--wait",
        "--timeout=5m",
    )
    after, bundle_after, timeout = tls()
    assert timeout == 6  # the upgrade did apply
    assert after == data and bundle_after == bundle
    # ... and the API server still trusts the webhook: a new pod is admitted and annotated.
    p = w.pod("after-upgrade", NS, w.container("app", w.burstable()))
    charted.kubectl.apply(w.dump(p))
    stored = w.wait_pod_running(charted.kubectl, NS, "after-upgrade")
    assert "resource-enforcer.dev/resources" in stored["metadata"]["annotations"]
