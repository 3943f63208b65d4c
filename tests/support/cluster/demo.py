"""`make cluster-demo`: the cluster up, example pods applied, `kubectl get pods -o wide` and
each container's real cpuset, memory nodes and classes (from its cgroup), then down."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cluster import truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster, say

DEMO_NS = "demo"


def demo(mode: str, root: Path | None = None, runtime: str = "containerd") -> int:
    cluster = Cluster(mode, root, runtime=runtime)
    cluster.up()
    try:
        k = cluster.kubectl
        w.configure(k)
        pods = [
            w.pod("exclusive", DEMO_NS, w.container("app", w.guaranteed("1"))),
            w.pod("shared", DEMO_NS, w.container("app", w.burstable())),
            w.pod("best-effort", DEMO_NS, w.container("app")),
        ]
        k.apply(w.dump(w.namespace(DEMO_NS), *pods))
        for p in pods:
            w.wait_pod_running(k, DEMO_NS, p["metadata"]["name"])
        print(k.run("get", "pods", "-A", "-o", "wide").stdout)
        print(f"{'POD':<14}{'CONTAINER':<11}{'QOS':<12}{'CPUS':<7}{'MEMS':<6}CLASSES (annotation)")
        for p in pods:
            name = p["metadata"]["name"]
            stored = k.json("-n", DEMO_NS, "get", "pod", name)
            ann = json.loads(
                stored["metadata"]
                .get("annotations", {})
                .get("resource-enforcer.dev/resources", "{}")
            )
            for c in truth.containers_of(k, DEMO_NS, name):
                classes = ann.get("containers", {}).get(c.container, {}).get("classes", {})
                print(
                    f"{name:<14}{c.container:<11}{c.qos:<12}{c.cpus:<7}{c.mems:<6}{classes or '-'}"
                )
        print(
            f"(cpuset read from /sys/fs/cgroup/cpuset/<kubelet's pod cgroup>/<container's>; "
            f"mode {mode}, runtime {runtime})"
        )
    finally:
        problems = cluster.down()
        say("down" if not problems else f"down, with leftovers: {problems}")
    return 0
