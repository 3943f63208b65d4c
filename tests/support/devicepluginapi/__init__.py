"""kubelet's device-plugin API (v1beta1) for the tests' device plugin only, generated from
``proto/deviceplugin/api.proto`` (``make proto``); never in the wheel."""
