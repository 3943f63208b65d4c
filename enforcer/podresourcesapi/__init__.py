"""kubelet's pod-resources API (v1), generated from ``proto/podresources/api.proto``.

``podresources_pb2``/``podresources_pb2_grpc``: the ``v1.PodResourcesLister`` service kubelet
serves on ``<kubelet-dir>/pod-resources/kubelet.sock`` (read by ``enforcer.podresources``).
Regenerate with ``make proto``.
"""
