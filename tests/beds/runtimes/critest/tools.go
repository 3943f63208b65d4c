//go:build tools

// Package tools pins cri-tools v1.37.0, whose critest (a ginkgo suite built with go test -c,
// as cri-tools' Makefile builds it) the test beds run against each runtime and the relay, and
// the ginkgo CLI that critest --parallel runs it under.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "sigs.k8s.io/cri-tools/pkg/validate"
)
