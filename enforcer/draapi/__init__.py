"""kubelet's DRA plugin API (v1) and plugin-registration API, generated from ``proto/dra/`` and
``proto/pluginregistration/``.

``dra_pb2``/``dra_pb2_grpc``: the ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` service a DRA
driver serves; ``registration_pb2``/``registration_pb2_grpc``: the
``pluginregistration.Registration`` service kubelet's plugin watcher calls. Regenerate with
``make proto``.
"""
