"""The cluster as a source of configuration: whether to use it, and starting its watch.

Whether it is one for this enforcer (options, credentials), and the ConfigMap watch that feeds
``ConfigManager``. The watch runs in its own thread, where it imports `kubernetes` (slow to
import) when it starts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from enforcer.app.config_precedence import ConfigManager
from enforcer.app.errors import StartError
from enforcer.cluster.client import in_cluster, make_api_client
from enforcer.cluster.config_source import ClusterConfig, ClusterConfigSource, Outcome
from enforcer.metrics import EnforcerMetrics
from enforcer.options import RunOptions

log = logging.getLogger("enforcer")


@dataclass(frozen=True)
class ClusterSettings:
    node: str
    namespace: str
    kubeconfig: str | None


def cluster_settings(options: RunOptions) -> ClusterSettings | None:
    """Whether the configuration comes from the cluster, and for which node."""
    if options.cluster_config == "off":
        return None
    credentials = bool(options.kubeconfig) or in_cluster()
    if options.cluster_config == "on":
        if not options.node_name:
            raise StartError("--cluster-config on needs --node-name (or $NODE_NAME)")
        if not credentials:
            raise StartError("--cluster-config on needs --kubeconfig or a pod's service account")
    elif not (options.node_name and credentials):
        log.info(
            "configuration from the cluster is off (auto: %s)",
            "no node name" if not options.node_name else "no API credentials",
        )
        return None
    assert options.node_name is not None
    return ClusterSettings(options.node_name, options.namespace, options.kubeconfig)


def start_cluster_source(
    cluster: ClusterSettings, manager: ConfigManager, metrics: EnforcerMetrics
) -> ClusterConfigSource:
    source: ClusterConfigSource

    def apply(chosen: ClusterConfig | None) -> Outcome:
        return manager.apply_from_thread(chosen, lambda: source.stopped)

    source = ClusterConfigSource(
        api_client=lambda: make_api_client(cluster.kubeconfig),
        namespace=cluster.namespace,
        node=cluster.node,
        apply=apply,
        on_error=lambda: metrics.controller_errors.labels("cluster-config").inc(),
    )
    return source.start()
