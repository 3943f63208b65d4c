"""The DRA driver `cpu.resource-enforcer.dev`: CPUs as devices in ResourceSlices, and the kubelet
plugin that prepares claims for them, over the same engine and registry as the CRI relay and the
NRI plugin. `devices` is pure; the rest are adapters."""
