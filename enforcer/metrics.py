"""The enforcer's Prometheus metrics. No label value comes from a peer: CRI methods are named
from the CRI's own list (`CRI_METHODS`), NRI methods and events from NRI's (`NRI_METHODS`,
`NRI_EVENTS`), anything else is counted as `other`. The HTTP endpoint that serves them is
`enforcer.app.metrics_server`."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from enforcer.build import version
from enforcer.policy import BalloonView
from enforcer.refusal import Reason
from enforcer.usage import USES, Usage

# The methods of runtime.v1.RuntimeService and runtime.v1.ImageService (k8s.io/cri-api); a
# test keeps this list in step with proto/. Any other path a client sends is "other": the
# relay passes every call through, so the paths are whatever a peer chooses to send.
_RUNTIME_METHODS = (
    "Version",
    "RunPodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PodSandboxStatus",
    "ListPodSandbox",
    "CreateContainer",
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "ListContainers",
    "ContainerStatus",
    "UpdateContainerResources",
    "ReopenContainerLog",
    "ExecSync",
    "Exec",
    "Attach",
    "PortForward",
    "ContainerStats",
    "ListContainerStats",
    "PodSandboxStats",
    "ListPodSandboxStats",
    "UpdateRuntimeConfig",
    "Status",
    "CheckpointContainer",
    "GetContainerEvents",
    "ListMetricDescriptors",
    "ListPodSandboxMetrics",
    "RuntimeConfig",
    "UpdatePodSandboxResources",
)
_IMAGE_METHODS = ("ListImages", "ImageStatus", "PullImage", "RemoveImage", "ImageFsInfo")
CRI_METHODS: dict[str, str] = {
    **{f"/runtime.v1.RuntimeService/{m}": m for m in _RUNTIME_METHODS},
    **{f"/runtime.v1.ImageService/{m}": m for m in _IMAGE_METHODS},
}
OTHER_METHOD = "other"
# NRI (nri.pkg.api.v1alpha1): the plugin service's methods the runtime calls, and the runtime
# service's methods the plugin calls (UpdateContainers: re-pins no response carried). A test
# keeps these in step with proto/nri/api.proto.
NRI_PLUGIN_METHODS = (
    "Configure",
    "Synchronize",
    "Shutdown",
    "CreateContainer",
    "UpdateContainer",
    "StopContainer",
    "StateChange",
    # NRI v0.12 and later: pod events and a container's start and removal as their own calls.
    "RunPodSandbox",
    "UpdatePodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PostCreateContainer",
    "StartContainer",
    "PostStartContainer",
    "PostUpdateContainer",
    "RemoveContainer",
)
NRI_SENT_METHODS = ("UpdateContainers",)
NRI_METHODS = NRI_PLUGIN_METHODS + NRI_SENT_METHODS
# The `event` label of a StateChange: the names of NRI's Event enum (a newer runtime's events
# are "other"); empty for the other methods.
NRI_EVENTS = (
    "RUN_POD_SANDBOX",
    "STOP_POD_SANDBOX",
    "REMOVE_POD_SANDBOX",
    "CREATE_CONTAINER",
    "POST_CREATE_CONTAINER",
    "START_CONTAINER",
    "POST_START_CONTAINER",
    "UPDATE_CONTAINER",
    "POST_UPDATE_CONTAINER",
    "STOP_CONTAINER",
    "REMOVE_CONTAINER",
    "UPDATE_POD_SANDBOX",
    "POST_UPDATE_POD_SANDBOX",
    "VALIDATE_CONTAINER_ADJUSTMENT",
)
# The `controller` label of resource_enforcer_controller_errors.
CONTROLLERS = ("cpuset", "rdt", "blockio", "cluster-config", "node-resource-topology")
# gRPC status codes are 0-16; anything else a peer made up is counted as -1.
_GRPC_CODES = range(17)


_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
# NRI answers: 1.5 s is the plugin's own deadline, 2 s containerd's (then it drops the plugin).
_NRI_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 5)


class _CRICalls(Collector):
    """resource_enforcer_cri_calls and resource_enforcer_cri_call_seconds: a counter by method
    and code and a latency histogram by method, the same series a prometheus ``Counter`` and
    ``Histogram`` would show, tallied in plain integers as calls finish and read at scrape.

    Every call through the relay is told here, on the relay's event loop: a dict lookup and
    three additions a call, where the library's ``inc`` and ``observe`` (a lock each, a
    Python loop over the buckets) cost five times that. The keys are bounded: method names
    from ``CRI_METHODS`` or "other", codes 0-16 or -1.
    """

    def __init__(self) -> None:
        self.calls: dict[tuple[str, int], int] = {}
        # By method: the count in each bucket (not cumulative), then +Inf, then the sum.
        self.latency: dict[str, list[float]] = {}
        # When each series began (the ``_created`` samples, as the library's own show).
        self.created: dict[tuple[str, int] | str, float] = {}

    def observe(self, name: str, code: int, seconds: float) -> None:
        calls = self.calls
        key = (name, code)
        count = calls.get(key)
        if count is None:
            count = 0
            self.created[key] = time.time()
        calls[key] = count + 1
        tally = self.latency.get(name)
        if tally is None:
            tally = self.latency[name] = [0] * (len(_LATENCY_BUCKETS) + 2)
            self.created[name] = time.time()
        tally[bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        tally[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        # list() copies in one step (a scrape from another thread sees no half-made dict).
        calls = CounterMetricFamily(
            "resource_enforcer_cri_calls", "CRI calls through the relay", labels=["method", "code"]
        )
        created = self.created
        for (name, code), count in list(self.calls.items()):
            calls.add_metric([name, str(code)], count, created=created.get((name, code)))
        yield calls
        seconds = HistogramMetricFamily(
            "resource_enforcer_cri_call_seconds",
            "CRI call latency through the relay",
            labels=["method"],
        )
        for name, tally in list(self.latency.items()):
            tally = tally[:]
            counts = accumulate(tally[:-1])
            buckets = [(bound, count) for bound, count in zip(_LE, counts, strict=True)]
            seconds.add_metric([name], buckets, tally[-1])
            began = created.get(name)
            if began is not None:
                seconds.samples.append(Sample(f"{seconds.name}_created", {"method": name}, began))
        yield seconds


_LE = [*(floatToGoString(b) for b in _LATENCY_BUCKETS), "+Inf"]


class EnforcerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._cri = _CRICalls()
        r.register(self._cri)
        self.nri_calls = Counter(
            "resource_enforcer_nri_calls",
            "NRI requests: the runtime's to the plugin (StateChange by event) and the "
            "plugin's UpdateContainers to the runtime, by ttrpc status code",
            ["method", "event", "code"],
            registry=r,
        )
        self.nri_seconds = Histogram(
            "resource_enforcer_nri_call_seconds",
            "NRI request latency: the plugin's answer time, or the runtime's for UpdateContainers",
            ["method", "event"],
            buckets=_NRI_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "resource_enforcer_policy_decisions",
            "containers placed, by placement kind",
            ["policy", "kind"],
            registry=r,
        )
        self.refusals = Counter(
            "resource_enforcer_policy_refusals",
            "CreateContainer calls refused, by reason",
            ["reason"],
            registry=r,
        )
        self.cpus = Gauge(
            "resource_enforcer_cpus",
            "CPUs by use: exclusive, claimed (held by prepared DRA claims), shared, reserved, free",
            ["use"],
            registry=r,
        )
        self.reloads = Counter(
            "resource_enforcer_config_reloads",
            "configuration reloads, by outcome",
            ["outcome"],
            registry=r,
        )
        self.controller_errors = Counter(
            "resource_enforcer_controller_errors",
            "failures writing controller settings",
            ["controller"],
            registry=r,
        )
        self.class_applications = Counter(
            "resource_enforcer_class_applications",
            "RDT and block-I/O class applications",
            ["kind", "class_name", "outcome"],
            registry=r,
        )
        self.repairs = Counter(
            "resource_enforcer_cpuset_repairs",
            "running containers whose cpuset the kernel had wrong, found and repaired",
            registry=r,
        )
        self.unrepaired = Counter(
            "resource_enforcer_cpuset_repairs_failed",
            "repairs that did not take: the container is reported in status and the log",
            registry=r,
        )
        self.held = Gauge(
            "resource_enforcer_containers_held",
            "running containers the configuration cannot place, kept on the CPUs they hold",
            registry=r,
        )
        self.not_as_asked = Gauge(
            "resource_enforcer_containers_not_placed_as_asked",
            "running containers adopted or placed again on the shared pool because the CPUs they "
            "asked for were taken; placed as asked once they are free",
            registry=r,
        )
        self.stuck = Gauge(
            "resource_enforcer_containers_stuck",
            "containers kubelet stopped that the runtime still lists (it could not remove them): "
            "kept on the shared pool until it does",
            registry=r,
        )
        self.state_writable = Gauge(
            "resource_enforcer_state_writable",
            "1 while the state can be saved; 0 while the state folder cannot be written or the "
            "saved state cannot be read (new containers and resizes are refused meanwhile)",
            registry=r,
        )
        # Per balloon (balloons policy): type names come from the configuration, never a peer.
        self.balloon_cpus = Gauge(
            "resource_enforcer_balloon_cpus",
            "CPUs of each balloon",
            ["balloon_type", "instance"],
            registry=r,
        )
        self.balloon_containers = Gauge(
            "resource_enforcer_balloon_containers",
            "containers in each balloon",
            ["balloon_type", "instance"],
            registry=r,
        )
        self.balloon_requested = Gauge(
            "resource_enforcer_balloon_requested_millicpu",
            "CPU requested by the containers of each balloon, in milli-CPU",
            ["balloon_type", "instance"],
            registry=r,
        )
        self._balloons: set[tuple[str, str]] = set()
        # Per CPU class: names from the configuration's cpuClasses only, 0 for a class no CPU
        # is in; a class the configuration drops loses its series.
        self.cpu_class_cpus = Gauge(
            "resource_enforcer_cpu_class_cpus",
            "CPUs the policy puts in each CPU class (frequencies and C-states of cpuClasses)",
            ["cpu_class"],
            registry=r,
        )
        self._cpu_classes: set[str] = set()
        # By pool and by NUMA node. Label values come from the hardware and the policy's pool
        # tree (root, socket0, socket0/node1, ...), never from a peer; pools that a new
        # configuration no longer has are removed.
        self.pool_cpus = Gauge(
            "resource_enforcer_pool_cpus",
            "CPUs of each pool by use: reserved, shared, exclusive, isolated (idle, for "
            "exclusive use), and free (could still be handed out exclusively)",
            ["pool", "use"],
            registry=r,
        )
        self.numa_cpus = Gauge(
            "resource_enforcer_numa_node_cpus",
            "CPUs of each NUMA node by use: reserved, shared, exclusive, isolated, free",
            ["node", "use"],
            registry=r,
        )
        self.numa_memory = Gauge(
            "resource_enforcer_numa_node_memory_bytes",
            "memory of each NUMA node: capacity, and available (capacity less the memory of "
            "containers pinned to it)",
            ["node", "use"],
            registry=r,
        )
        self.topology_writes = Counter(
            "resource_enforcer_node_resource_topology_writes",
            "NodeResourceTopology writes to the API server, by outcome: written, failed",
            ["outcome"],
            registry=r,
        )
        self._usage_labels: dict[Gauge, set[tuple[str, ...]]] = {}
        self.build_info = Gauge(
            "resource_enforcer_build_info",
            "The running build: always 1, its version as a label",
            ["version"],
            registry=r,
        )
        self.build_info.labels(version()).set(1)
        # Series whose label values are a fixed set exist from the start (at 0): a dashboard's
        # rate() shows 0, not "no data", and an alert on increase() sees the first one.
        for reason in Reason:
            self.refusals.labels(reason.value)
        for controller in CONTROLLERS:
            self.controller_errors.labels(controller)
        for outcome in ("applied", "refused", "failed"):
            self.reloads.labels(outcome)
        for outcome in ("written", "failed"):
            self.topology_writes.labels(outcome)

        # (method name, code) -> its counter and histogram children: observe_call runs on the
        # relay's event loop for every call, and labels() lookups cost more than the counting.
        # Bounded: (len(CRI_METHODS) + 1) x 18 keys at most.
        # The same for NRI: (len(NRI_METHODS) + len(NRI_EVENTS) + 2) x 18 keys at most.
        self._nri_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def set_balloons(self, balloons: Iterable[BalloonView]) -> None:
        """The balloons now; the series of balloons that are gone are removed."""
        now = set()
        for b in balloons:
            labels = (b.type, str(b.instance))
            now.add(labels)
            self.balloon_cpus.labels(*labels).set(len(b.cpus))
            self.balloon_containers.labels(*labels).set(len(b.containers))
            self.balloon_requested.labels(*labels).set(b.milli)
        for labels in self._balloons - now:
            for gauge in (self.balloon_cpus, self.balloon_containers, self.balloon_requested):
                gauge.remove(*labels)
        self._balloons = now

    def set_cpu_classes(self, configured: Iterable[str], classes: Mapping[int, str]) -> None:
        """CPUs per configured CPU class now (a name not configured is never a label)."""
        now = set(configured)
        counts = dict.fromkeys(now, 0)
        for name in classes.values():
            if name in counts:
                counts[name] += 1
        for name, count in counts.items():
            self.cpu_class_cpus.labels(name).set(count)
        for name in self._cpu_classes - now:
            self.cpu_class_cpus.remove(name)
        self._cpu_classes = now

    def set_usage(self, usage: Usage) -> None:
        """The pool and NUMA node gauges from one measurement."""
        values: dict[Gauge, dict[tuple[str, ...], float]] = {
            self.pool_cpus: {},
            self.numa_cpus: {},
            self.numa_memory: {},
        }
        for pool in usage.pools:
            for use in USES:
                values[self.pool_cpus][(pool.name, use)] = getattr(pool.cpu, use)
        for node in usage.nodes:
            if node.cpus:
                for use in USES:
                    values[self.numa_cpus][(str(node.node), use)] = getattr(node.cpu, use)
            values[self.numa_memory][(str(node.node), "capacity")] = node.memory_capacity
            values[self.numa_memory][(str(node.node), "available")] = node.memory_available
        for gauge, samples in values.items():
            for labels, value in samples.items():
                gauge.labels(*labels).set(value)
            for stale in self._usage_labels.get(gauge, set()) - samples.keys():
                gauge.remove(*stale)
            self._usage_labels[gauge] = set(samples)

    def observe_call(self, method: str, code: int, seconds: float) -> None:
        if code not in _GRPC_CODES:
            code = -1
        self._cri.observe(CRI_METHODS.get(method, OTHER_METHOD), code, seconds)

    def observe_nri(self, method: str, code: int, seconds: float, event: str = "") -> None:
        """One NRI request: ``method`` from NRI_METHODS, ``event`` (a StateChange's) from
        NRI_EVENTS; anything else is "other"."""
        if method not in NRI_METHODS:
            method = OTHER_METHOD
        if method != "StateChange":
            event = ""
        elif event not in NRI_EVENTS:
            event = OTHER_METHOD
        if code not in _GRPC_CODES:
            code = -1
        key = (method, event, code)
        children = self._nri_children.get(key)
        if children is None:
            children = (
                self.nri_calls.labels(method, event, str(code)),
                self.nri_seconds.labels(method, event),
            )
            self._nri_children[key] = children
        children[0].inc()
        children[1].observe(seconds)
