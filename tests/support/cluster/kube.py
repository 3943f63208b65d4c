"""kubectl of the cluster's own release, run against its admin kubeconfig."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from typing import Any

from tests.support.cluster.layout import Layout


class Kubectl:
    """``.cluster/bin/kubectl --kubeconfig .cluster/kubeconfig ...``"""

    def __init__(self, lay: Layout) -> None:
        self.lay = lay

    def argv(self, *args: str) -> list[str]:
        return [str(self.lay.kubectl), f"--kubeconfig={self.lay.kubeconfig}", *args]

    def run(
        self, *args: str, input: str | None = None, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl; with ``check``, a non-zero exit raises KubectlError with its stderr."""
        out = subprocess.run(
            self.argv(*args), input=input, capture_output=True, text=True, timeout=timeout
        )
        if check and out.returncode != 0:
            raise KubectlError(args, out)
        return out

    def json(self, *args: str, timeout: float = 60) -> Any:
        return json.loads(self.run(*args, "-o", "json", timeout=timeout).stdout)

    def apply(self, manifest: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", *extra, input=manifest)


class KubectlError(RuntimeError):
    def __init__(self, args: Sequence[str], out: subprocess.CompletedProcess[str]) -> None:
        self.returncode = out.returncode
        self.stdout = out.stdout
        self.stderr = out.stderr
        super().__init__(f"kubectl {' '.join(args)} exited {out.returncode}: {out.stderr.strip()}")
