"""The CRI relay: an HTTP/2 gRPC intermediary (h2/) and the CRI calls it intercepts (service)."""
