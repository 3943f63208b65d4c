"""The one-shot subcommands of `resource-enforcer` (status, plan, check-config)."""
