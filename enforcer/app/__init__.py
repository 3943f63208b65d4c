"""The enforcer daemon, `resource-enforcer run`: its wiring and its jobs, one module each.

- ``run``: the wiring: the relay, the enforcer behind it, and everything below, until stopped;
- ``owned_state``: the state store that writes only while this process holds the state lock;
- ``config_precedence``: which configuration is in force (cluster, stored, file, built-in)
  and the one way to change it;
- ``cluster_source``: whether the configuration comes from the cluster, and its watch;
- ``watch``: reloading the --config file when it changes or on SIGHUP;
- ``health``: the health file the DaemonSet's probes read;
- ``metrics_endpoint``: /metrics and /healthz, bound in the background when the port is taken;
- ``errors``: why the enforcer cannot start.
"""
