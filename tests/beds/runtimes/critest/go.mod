module kre.local/beds/critest

go 1.26.6

require (
	sigs.k8s.io/cri-tools v1.37.0
	// The ginkgo CLI, for critest --parallel (it execs `ginkgo --nodes=N`): the version
	// cri-tools v1.37.0 itself requires, so the CLI and the suite's library are one version.
	github.com/onsi/ginkgo/v2 v2.32.1
)
