"""CRI v1 (``runtime.v1``) messages and gRPC stubs, generated from ``proto/cri/api.proto``.

``api_pb2`` holds the messages, ``api_pb2_grpc`` the ``RuntimeServiceStub``/``ImageServiceStub``
clients and servicer bases. Regenerate with ``make proto``.
"""
