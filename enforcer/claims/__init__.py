"""What the scheduler would allocate for ResourceClaims (resource.k8s.io/v1) from ResourceSlice
devices: a pure simulation over plain data, for `resource-enforcer plan`. No I/O."""
