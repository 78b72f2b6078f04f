"""Offline checks of the Kubernetes manifests of deploy/k8s/: the kustomization, each manifest against the
Kubernetes JSON schemas, and what the Deployment, Service, PodDisruptionBudget, ScaledObject and ServiceMonitor
promise the server and each other.

Nothing here needs a cluster. `kubernetes-validate` (dev extra) bundles the Kubernetes JSON schemas; `kubectl`
(its built-in kustomize builds deploy/k8s offline) is optional: the kustomize test skips without it.

The KEDA ScaledObject and deploy/kserve/ are checked against their CRD schemas in tests/test_deploy_kserve.py.
"""

from __future__ import annotations

import shutil

import pytest
import yaml
from deploy_tools import check_expr, run
from monitoring import K8S_DIR

# --------------------------------------------------------------------------------------------------
# Kubernetes

K8S_VERSIONS = ["1.30.0", "1.34.0", "1.37.0"]


def k8s_docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S_DIR / name).read_text()) if d]


def core_manifests() -> list[str]:
    kust = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    return kust["resources"]


OPTIONAL_MANIFESTS = {"scaledobject.yaml": "KEDA", "servicemonitor.yaml": "the Prometheus Operator"}


def test_kustomization_lists_every_core_manifest():
    listed = set(core_manifests())
    on_disk = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml", *OPTIONAL_MANIFESTS}
    assert listed == on_disk
    for name, needs in OPTIONAL_MANIFESTS.items():
        assert name not in listed, (
            f"{name} is a CRD of {needs}: it must not break `kubectl apply -k` without it"
        )


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_validate(version):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kinds = []
    for name in core_manifests():
        for doc in k8s_docs(name):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                pytest.fail(
                    f"{name}: {doc['kind']}/{doc['metadata']['name']} invalid for {version} at {path}: {e.message}"
                )
            kinds.append(doc["kind"])
    assert sorted(kinds) == ["Deployment", "PersistentVolumeClaim", "PodDisruptionBudget", "Service"]


def test_kustomize_builds_the_core_resources():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (its `kubectl kustomize` builds deploy/k8s offline)")
    r = run([kubectl, "kustomize", str(K8S_DIR)])
    assert r.returncode == 0, r.stderr
    built = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert sorted(d["kind"] for d in built) == [
        "Deployment",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
        "Service",
    ]
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "s2s" for d in built)


def k8s_objects() -> dict[str, dict]:
    return {doc["kind"]: doc for name in core_manifests() for doc in k8s_docs(name)}


def container_env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def prestop_sleep_s(container: dict) -> int:
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, command
    return int(command[1])


DRAIN_SPARE_S = 5  # what the pod's grace period keeps beyond the preStop sleep and S2S_GRACE_S


def test_k8s_deployment():
    objs = k8s_objects()
    dep = objs["Deployment"]
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert c[probe]["grpc"] == {"port": 8001, "service": ""}, probe
    env = container_env(c)
    assert env["S2S_PORT"] == "8001" and env["S2S_METRICS_PORT"] == "8002" and env["S2S_HTTP_PORT"] == "8000"
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "8002"
    assert ann["prometheus.io/path"] == "/metrics"
    sc = pod["spec"]["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0


def test_k8s_drain_fits_the_grace_period():
    """SIGTERM comes after the preStop sleep; the server then gives what is in flight S2S_GRACE_S (its default,
    10 s, is what the pod got before): all of it within terminationGracePeriodSeconds, or the kubelet's SIGKILL
    cuts the drain short."""
    pod = k8s_objects()["Deployment"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    grace = float(container_env(c)["S2S_GRACE_S"])
    assert grace > 10, "the server's default drain is 10 s: the pod's grace period buys more"
    assert prestop_sleep_s(c) + grace + DRAIN_SPARE_S <= pod["terminationGracePeriodSeconds"]


def test_k8s_models_from_a_read_only_claim_and_per_model_readiness():
    objs = k8s_objects()
    pod, claim = objs["Deployment"]["spec"]["template"]["spec"], objs["PersistentVolumeClaim"]
    (c,) = pod["containers"]
    env = container_env(c)
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == env["S2S_MODEL_REPO"]]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"], "readOnly": True}
    assert claim["spec"]["accessModes"] == ["ReadOnlyMany"], "every replica mounts it, on any node"
    assert env["S2S_READINESS"] == "per-model"


def test_k8s_headless_service_and_disruption_budget():
    objs = k8s_objects()
    dep, svc, pdb = objs["Deployment"], objs["Service"], objs["PodDisruptionBudget"]
    assert svc["spec"]["clusterIP"] == "None", "gRPC client-side round_robin needs a headless Service"
    assert svc["metadata"]["name"] == "s2s-headless"
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
    assert ports == {"http": (8000, "http"), "grpc": (8001, "grpc"), "metrics": (8002, "metrics")}
    assert svc["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1 < dep["spec"]["replicas"]


def test_k8s_scaledobject_scales_the_deployment_on_the_queue():
    """KEDA reads the queue straight from Prometheus: no prometheus-adapter rule to ship, and nothing that an
    unreadable custom metric can pin at its peak (tests/test_kserve_runtime.py evaluates the query live)."""
    (so,) = k8s_docs("scaledobject.yaml")
    dep = k8s_objects()["Deployment"]
    ref = so["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", dep["metadata"]["name"])
    assert so["spec"]["minReplicaCount"] <= dep["spec"]["replicas"] <= so["spec"]["maxReplicaCount"]
    (prom,) = [t for t in so["spec"]["triggers"] if t["type"] == "prometheus"]
    names = check_expr("scaledobject.yaml", prom["metadata"]["query"], {})
    assert names == {"s2s_queued_sequences"}
    assert float(prom["metadata"]["threshold"]) > 0


def test_k8s_servicemonitor():
    (sm,) = k8s_docs("servicemonitor.yaml")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1" and sm["kind"] == "ServiceMonitor"
    svc = k8s_objects()["Service"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]} and ep["port"] == "metrics"
    assert ep["interval"] == "5s" and ep.get("path", "/metrics") == "/metrics"
