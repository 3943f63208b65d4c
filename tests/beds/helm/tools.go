//go:build tools

// Package tools pins the helm command of the chart tests (tests/beds/helm.sh builds it).
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
