"""The single-node Kubernetes test bed (tests/beds/cluster/): upstream programs, run here."""
