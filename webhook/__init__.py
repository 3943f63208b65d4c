"""kube-resource-enforcer's mutating admission webhook (docs/webhook.md)."""
