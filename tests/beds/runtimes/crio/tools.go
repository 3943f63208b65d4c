//go:build tools

// Package tools pins CRI-O, whose crio the test beds build (pinns is built from the same
// module's C sources).
package tools

import (
	_ "github.com/cri-o/cri-o/cmd/crio"
)
