"""The helm command of the tests (built by tests/beds/helm.sh) and the chart it renders.

``helm_bin()`` runs the bed script, which builds helm once from its pinned Go module and then
only prints the cached folder; a failed build is an error, never a skip. ``render()`` is
`helm template` with ``--set``/values of the caller, parsed into objects.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kube-resource-enforcer"
BED = REPO / "tests" / "beds" / "helm.sh"
# The labels Helm's conventions add to every object's metadata (none to pod templates or
# selectors): the chart's objects are deploy/'s with these on top.
HELM_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)


class HelmError(RuntimeError):
    def __init__(self, argv: list[str], out: subprocess.CompletedProcess[str]) -> None:
        self.stderr = out.stderr
        super().__init__(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.strip()}")


@functools.cache
def helm_bin() -> Path:
    """The pinned helm, built by the bed script if it is not cached yet."""
    out = subprocess.run([str(BED)], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{BED} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1]) / "helm"


def helm(*args: str, input: str | None = None, timeout: float = 120) -> str:
    argv = [str(helm_bin()), *args]
    out = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise HelmError(argv, out)
    return out.stdout


def set_args(values: dict[str, str]) -> list[str]:
    return [f"--set={k}={v}" for k, v in values.items()]


def render(
    values: dict[str, str] | None = None,
    *,
    values_file: Path | None = None,
    namespace: str = "resource-enforcer",
    release: str = "kre",
) -> list[dict[str, Any]]:
    """The objects `helm template` renders (empty documents dropped)."""
    argv = ["template", release, str(CHART), f"--namespace={namespace}"]
    if values_file is not None:
        argv.append(f"--values={values_file}")
    text = helm(*argv, *set_args(values or {}))
    return [d for d in yaml.safe_load_all(text) if d]


def without_helm_labels(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` without Helm's own labels on its metadata."""
    labels = {k: v for k, v in doc["metadata"].get("labels", {}).items() if k not in HELM_LABELS}
    meta = {**doc["metadata"], "labels": labels}
    if not labels:
        del meta["labels"]
    return {**doc, "metadata": meta}
