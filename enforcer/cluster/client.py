"""Credentials for the API server: a kubeconfig file, or the pod's service account."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported lazily: `kubernetes` takes ~0.4 s to import
    from kubernetes.client import ApiClient

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def in_cluster() -> bool:
    """Whether this process runs in a pod with the API server's address in its environment."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        os.path.join(SERVICE_ACCOUNT_DIR, "token")
    )


def make_api_client(kubeconfig: str | None) -> ApiClient:
    """An ApiClient from `kubeconfig`, else from the service account. Reads files only: it
    never contacts the API server. Raises kubernetes' ConfigException when neither works."""
    from kubernetes import client, config

    if kubeconfig:
        # persist_config=False: never write refreshed tokens back into the user's file.
        return config.new_client_from_config(config_file=kubeconfig, persist_config=False)
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)
