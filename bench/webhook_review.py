"""The webhook benchmark's request: an AdmissionReview of a Deployment's pod, and a template
that makes every request a pod the webhook has not seen."""

from __future__ import annotations

import json
from typing import Any


def sample_review(uid: str = "0f5d4b9e-7d5b-4b6e-9a51-3c1f2d8e6a70") -> dict[str, Any]:
    """A CREATE of a Deployment's pod as the API server sends it (managedFields included):
    an init container, the app, a sidecar, a pod-level RDT class request."""
    container_fields = {
        "f:image": {},
        "f:imagePullPolicy": {},
        "f:name": {},
        "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}},
        "f:terminationMessagePath": {},
        "f:terminationMessagePolicy": {},
    }
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "shop-web-7d4b9c8f6d-",
            "namespace": "shop",
            "creationTimestamp": None,
            "labels": {"app": "shop-web", "pod-template-hash": "7d4b9c8f6d", "tier": "frontend"},
            "annotations": {
                "rdtclass.resource-enforcer.dev/pod": "gold",
                "kubectl.kubernetes.io/restartedAt": "2026-11-20T10:00:00Z",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "shop-web-7d4b9c8f6d",
                    "uid": "4c0a9a3e-96a7-4d38-8a9f-7b8f1f2f9c11",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-20T10:00:01Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:generateName": {},
                            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                            "f:ownerReferences": {".": {}, 'k:{"uid":"4c0a9a3e"}': {}},
                        },
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"app"}': container_fields,
                                'k:{"name":"envoy"}': container_fields,
                            },
                            "f:initContainers": {'k:{"name":"migrate"}': container_fields},
                            "f:dnsPolicy": {},
                            "f:restartPolicy": {},
                        },
                    },
                }
            ],
        },
        "spec": {
            "volumes": [
                {
                    "name": "kube-api-access-8xk2p",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
            "initContainers": [
                {
                    "name": "migrate",
                    "image": "registry.example/shop/migrate:1.4.2",
                    "command": ["/migrate", "--wait"],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/shop/web:1.4.2",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "GOMAXPROCS", "value": "2"}],
                    "resources": {
                        "requests": {"cpu": "2", "memory": "1Gi"},
                        "limits": {"cpu": "2", "memory": "1Gi"},
                    },
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "envoy",
                    "image": "registry.example/envoy:1.29",
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "128Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "8d3c1a60-2a57-4b8e-b6a0-61f1c3c1d9a2",
                "groups": [
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                    "system:authenticated",
                ],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


UID_MARK, MEMORY_MARK = "@UID@", "@MEM@"


def distinct_template() -> bytes:
    """The sample review with marks where each request gets its own uid and its own memory
    size for the app container (request = limit): every review is a pod the webhook has not
    seen, so no memoized annotation or patch answers it."""
    r = sample_review(uid=UID_MARK)
    app = r["request"]["object"]["spec"]["containers"][0]["resources"]
    app["requests"]["memory"] = app["limits"]["memory"] = MEMORY_MARK
    return json.dumps(r, separators=(",", ":")).encode()


def distinct_body(template: bytes, n: int) -> bytes:
    """The n-th distinct review, as the wrk script below makes it."""
    uid = f"{n:08x}-0000-4000-8000-{n:012x}"
    return template.replace(UID_MARK.encode(), uid.encode()).replace(
        MEMORY_MARK.encode(), f"{1048576 + n}Ki".encode()
    )
