"""Kubeconfigs that act as a ServiceAccount, for programs that must run with exactly its
RBAC the way a pod would (the operator under test, kubectl)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml


def service_account_kubeconfig(
    kubectl: Callable[..., str],
    admin_kubeconfig: Path,
    service_account: str,
    namespace: str,
    path: Path,
    expiration_seconds: int = 3600,
) -> Path:
    """Write `path`: the admin kubeconfig's cluster and a real token of the account
    (a TokenRequest made with `kubectl(*args, input=...)` as admin)."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": expiration_seconds},
    }
    out = kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
        "-f",
        "-",
        input=json.dumps(request),
    )
    token = json.loads(out)["status"]["token"]
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    (cluster,) = admin["clusters"]
    user = f"{namespace}:{service_account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
