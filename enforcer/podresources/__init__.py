"""kubelet's pod-resources API as the engine's `DeviceSource`: the devices kubelet gave a
container (device plugins and DRA) and their NUMA nodes, for policy.preferCloseToDevices."""

from enforcer.podresources.client import PodResourcesClient, socket_path

__all__ = ["PodResourcesClient", "socket_path"]
