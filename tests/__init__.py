"""The test suite; `tests.support` is its tooling, shared with the demo and the benchmarks."""
