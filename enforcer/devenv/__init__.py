"""Development and test environment: a private containerd and locally built images."""
