"""Test and demo stand-ins for the parts of a node we do not run (kubelet)."""

from enforcer.emulator.kubelet import KubeletEmulator, RunningPod, cgroup_path, pod_qos_class

__all__ = ["KubeletEmulator", "RunningPod", "cgroup_path", "pod_qos_class"]
