"""Reading the deployment files as the tools do: `kubectl kustomize`, and Dockerfile instructions.

For the tests that check deploy/ and the Dockerfiles against each other and the CLI.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml


def kustomize(path: Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize PATH` renders."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise RuntimeError("kubectl is needed (apt-get install kubernetes-client; .ci/run does)")
    out = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path} failed: {out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def dockerfile(path: Path) -> dict[str, list[str]]:
    """Instruction -> its arguments, continuation lines joined, comments dropped."""
    text = path.read_text().replace("\\\n", " ")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.setdefault(word.upper(), []).append(rest.strip())
    return out


def exec_form(value: str) -> list[str]:
    """An ENTRYPOINT/CMD value as the argument list it runs."""
    return json.loads(value) if value.startswith("[") else shlex.split(value)
