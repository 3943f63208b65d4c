"""NRI and ttrpc messages, generated from ``proto/nri/api.proto`` and ``proto/ttrpc/request.proto``.

``api_pb2``: the NRI API v0.6.1 (``nri.pkg.api.v1alpha1``) that containerd 1.7 speaks;
``request_pb2``: ttrpc's Request/Response envelope. Messages only: the services are served
and called by the hand-written transport in ``enforcer.nri``. Regenerate with ``make proto``.
"""
