"""kubelet's conversions from requests and limits to CRI values (pkg/kubelet/cm).

The decoder inverts them; the kubelet emulator applies them.
"""

MIN_SHARES = 2
SHARES_PER_CPU = 1024
QUOTA_PERIOD = 100_000  # microseconds
MIN_QUOTA = 1000


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """cpu.shares for a CPU request in milli-CPU (kubelet's MilliCPUToShares)."""
    return max(MIN_SHARES, milli_cpu * SHARES_PER_CPU // 1000)


def milli_cpu_to_quota(milli_cpu: int, period: int = QUOTA_PERIOD) -> int:
    """CFS quota for a CPU limit in milli-CPU; 0 means no limit (kubelet's MilliCPUToQuota)."""
    if milli_cpu <= 0:
        return 0
    return max(MIN_QUOTA, milli_cpu * period // 1000)
