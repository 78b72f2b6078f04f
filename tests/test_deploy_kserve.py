"""deploy/kserve/ and the KEDA ScaledObject of deploy/k8s/, offline.

Each custom resource validates against its upstream CRD schema, pinned in tests/crd_schemas/ (KServe v0.20.0's
InferenceService and ClusterServingRuntime, KEDA v2.20.2's ScaledObject: each file's "$comment" names the upstream
commit and path; scripts/cut_crd_schema.py cut them to the fields deploy/ uses and refuses any other, as
`kubectl apply --validate=strict` would) with jsonschema; the built-in kinds with kubernetes-validate, as
tests/test_deploy_k8s.py does. Then the runtime's contract with the server and the bundles. The runtime runs for real in
tests/test_kserve_runtime.py.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess

import jsonschema
import pytest
import yaml
from conftest import ROOT
from kserve_runtime import (
    KSERVE_DIR,
    MOUNT,
    POD_GRACE_DEFAULT_S,
    declared_ports,
    documents,
    fill_template,
    inference_services,
    runtime,
    served_bundle,
    storage_files,
)
from monitoring import EXPORTED_METRICS, promql_parts

from contract.bundle import READABLE_FORMATS
from contract.config import read_json

SCHEMA_DIR = ROOT / "tests" / "crd_schemas"
SCHEMAS = {
    ("serving.kserve.io/v1beta1", "InferenceService"): "kserve-inferenceservice.json",
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "kserve-clusterservingruntime.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda-scaledobject.json",
}
K8S_VERSIONS = ["1.30.0", "1.34.0", "1.37.0"]
SCALED_OBJECT = ROOT / "deploy" / "k8s" / "scaledobject.yaml"
FORMAT = "s2s-bundle"


OPERATOR_KINDS = {
    "PodMonitor"
}  # the Prometheus Operator's: checked by hand below, as tests/test_deploy_k8s.py does


def manifests() -> list[tuple[str, dict]]:
    paths = sorted(KSERVE_DIR.glob("*.yaml")) + [SCALED_OBJECT]
    docs = [(p.name, d) for p in paths if p.name != "kustomization.yaml" for d in documents(p)]
    return [(name, d) for name, d in docs if d["kind"] not in OPERATOR_KINDS]


def validator(doc: dict) -> jsonschema.Draft7Validator:
    schema = json.loads((SCHEMA_DIR / SCHEMAS[doc["apiVersion"], doc["kind"]]).read_text())
    return jsonschema.Draft7Validator(schema)


def test_custom_resources_validate_against_the_upstream_crds():
    seen = set()
    for name, doc in manifests():
        if (doc["apiVersion"], doc["kind"]) not in SCHEMAS:
            continue
        errors = [
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(doc).iter_errors(doc)
        ]
        assert not errors, f"{name}: {doc['kind']}/{doc['metadata']['name']}: {errors}"
        seen.add(doc["kind"])
    assert seen == {kind for _, kind in SCHEMAS}
    for file in SCHEMAS.values():
        note = json.loads((SCHEMA_DIR / file).read_text())["$comment"]
        assert "commit" in note and "config/crd/" in note, f"{file}: say which upstream file this is: {note}"


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["spec"].__setitem__("predictorr", d["spec"].pop("predictor")),  # a misspelt field
        lambda d: d["spec"]["predictor"].__setitem__("minReplicas", "one"),  # a wrong type
        lambda d: d["spec"]["predictor"]["autoScaling"]["metrics"][0]["external"]["metric"].__setitem__(
            "backend",
            "influxdb",  # not one of the enum
        ),
        lambda d: d["spec"].pop("predictor"),  # a required field
    ],
    ids=["unknown-field", "wrong-type", "not-in-enum", "no-predictor"],
)
def test_the_pinned_schemas_refuse_what_upstream_refuses(change):
    doc = copy.deepcopy(inference_services()["addition"])
    change(doc)
    assert list(validator(doc).iter_errors(doc)), "the schema accepted a broken InferenceService"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_builtin_kinds_validate(version):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kinds = []
    for name, doc in manifests():
        if (doc["apiVersion"], doc["kind"]) in SCHEMAS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} invalid for {version}: {e.message}")
        kinds.append(doc["kind"])
    assert sorted(kinds) == ["PodDisruptionBudget", "PodDisruptionBudget", "Secret", "ServiceAccount"]


def test_kustomize_builds_deploy_kserve():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (its `kubectl kustomize` builds deploy/kserve offline)")
    r = subprocess.run([kubectl, "kustomize", str(KSERVE_DIR)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    kinds = sorted(d["kind"] for d in documents_of(r.stdout))
    listed = sorted(d["kind"] for name, d in manifests() if name != SCALED_OBJECT.name)
    assert kinds == listed, "kustomization.yaml lists every file of deploy/kserve"


def documents_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


# ---- the runtime's contract ---------------------------------------------------------------------------


def test_the_runtime_serves_every_bundle_format_this_server_reads():
    spec = runtime()["spec"]
    formats = spec["supportedModelFormats"]
    assert {f["name"] for f in formats} == {FORMAT}
    assert sorted(int(f["version"]) for f in formats) == sorted(READABLE_FORMATS)
    assert all(f["autoSelect"] for f in formats)
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]


def test_the_runtime_serves_the_mounted_model_under_the_inference_services_name_on_kserves_ports():
    rt = runtime()
    (c,) = rt["spec"]["containers"]
    assert c["name"] == "kserve-container"
    args = fill_template(c, {"name": "addition"})["args"]
    assert args[:2] == ["s2s", "serve"]
    assert f"--model-repo={MOUNT}" in args and "--model-name=addition" in args
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["ports"][0]["name"] == "http", "KServe publishes the first port on the Service's port 80"
    assert ports == {"http": 8080, "h2c": 9000, "metrics": 8002}, (
        "KServe's REST and gRPC ports, Triton's metrics"
    )
    flags = dict(a.split("=", 1) for a in args[2:])
    assert (flags["--http-port"], flags["--port"], flags["--metrics-port"]) == ("8080", "9000", "8002")
    ann = rt["spec"]["annotations"]
    assert ann["prometheus.kserve.io/port"] == ann["prometheus.io/port"] == "8002"
    assert ann["prometheus.kserve.io/path"] == ann["prometheus.io/path"] == "/metrics"
    assert declared_ports(c, ann) == {8080, 9000, 8002}
    for probe in ("startupProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/v2/health/ready", "port": 8080}, probe
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": 8080}
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600, (
        "large models get 10 minutes to load"
    )
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0 and sc["readOnlyRootFilesystem"] is True
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp"}


def effective_env(isvc: dict) -> dict[str, str]:
    (c,) = runtime()["spec"]["containers"]
    return {e["name"]: e["value"] for e in c["env"] + isvc["spec"]["predictor"]["model"].get("env", [])}


@pytest.mark.parametrize("name", sorted(inference_services()))
def test_each_inference_service_drains_within_its_grace_period(name):
    """The kubelet sends SIGTERM after the preStop sleep and SIGKILL at terminationGracePeriodSeconds: the
    server's drain (S2S_GRACE_S, an InferenceService's env over the runtime's) must end before."""
    isvc = inference_services()[name]
    (c,) = runtime()["spec"]["containers"]
    prestop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert prestop[0] == "sleep"
    pod_grace = isvc["spec"]["predictor"].get("terminationGracePeriodSeconds", POD_GRACE_DEFAULT_S)
    drain = float(effective_env(isvc)["S2S_GRACE_S"])
    assert drain > 10, "the server's default drain (10 s) is what the pods got before"
    assert int(prestop[1]) + drain + 5 <= pod_grace


@pytest.mark.parametrize("name", sorted(inference_services()))
def test_each_inference_service_selects_the_runtime_for_the_bundle_it_stores(name):
    isvc = inference_services()[name]
    ann, pred = isvc["metadata"]["annotations"], isvc["spec"]["predictor"]
    assert (
        ann["serving.kserve.io/deploymentMode"] == "Standard"
        and ann["serving.kserve.io/autoscalerClass"] == "keda"
    )
    assert ann["serving.kserve.io/enable-prometheus-scraping"] == "false", (
        "true repoints the pods at port 9091"
    )
    model = pred["model"]
    assert model["runtime"] == runtime()["metadata"]["name"] and model["modelFormat"]["name"] == FORMAT
    assert model["protocolVersion"] in runtime()["spec"]["protocolVersions"]
    files = storage_files(model["storageUri"])
    bundle = served_bundle(files)
    config = read_json(files[f"{bundle}/config.json".lstrip("/")])
    assert model["modelFormat"]["version"] == str(config["format_version"]), f"{name}: {bundle or '.'}"
    assert any(
        f["version"] == model["modelFormat"]["version"] for f in runtime()["spec"]["supportedModelFormats"]
    )
    (pdb,) = [
        d
        for p in KSERVE_DIR.glob("*.yaml")
        for d in documents(p)
        if d["kind"] == "PodDisruptionBudget" and d["metadata"]["name"] == name
    ]
    assert pdb["spec"]["selector"]["matchLabels"] == {"serving.kserve.io/inferenceservice": name}


@pytest.mark.parametrize("name", sorted(inference_services()))
def test_each_inference_service_scales_on_its_own_models_queue(name):
    pred = inference_services()[name]["spec"]["predictor"]
    assert 1 <= pred["minReplicas"] <= pred["maxReplicas"]
    (metric,) = pred["autoScaling"]["metrics"]
    assert metric["type"] == "External" and metric["external"]["metric"]["backend"] == "prometheus"
    query = metric["external"]["metric"]["query"]
    names, selectors, _ = promql_parts(query)
    assert names == {"s2s_queued_sequences"} and "s2s_queued_sequences" in EXPORTED_METRICS
    assert selectors == [("s2s_queued_sequences", {"model"})]
    assert f'model="{name}"' in query, "the model label is the InferenceService's name (--model-name)"
    assert float(metric["external"]["target"]["value"]) > 0


def test_the_pod_monitor_scrapes_the_runtimes_metrics_port():
    (pm,) = documents(KSERVE_DIR / "podmonitor.yaml")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1" and pm["kind"] == "PodMonitor"
    rt = runtime()
    assert pm["spec"]["selector"]["matchLabels"].items() <= rt["spec"]["labels"].items()
    (c,) = rt["spec"]["containers"]
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    (port,) = [p for p in c["ports"] if p["name"] == ep["port"]]
    assert port["containerPort"] == int(rt["spec"]["annotations"]["prometheus.kserve.io/port"])
    assert ep["path"] == rt["spec"]["annotations"]["prometheus.kserve.io/path"]
    kust = yaml.safe_load((KSERVE_DIR / "kustomization.yaml").read_text())
    assert "podmonitor.yaml" not in kust["resources"], (
        "a CRD of the operator must not break `kubectl apply -k`"
    )


def test_kind_up_script_parses_and_applies_files_that_exist():
    """deploy/kserve/kind-up.sh needs Docker, kind and the internet, so it is not run here: it parses, and every
    file of this repository it applies or builds from is there."""
    script = KSERVE_DIR / "kind-up.sh"
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    text = script.read_text()
    paths = set(re.findall(r"\b(deploy/[\w./-]+\.(?:yaml|Dockerfile))", text)) | set(
        re.findall(r"\bmodels/\w+", text)
    )
    assert {"deploy/kserve/servingruntime.yaml", "deploy/kserve/inferenceservice-addition.yaml"} <= paths
    for path in paths:
        assert (ROOT / path).exists(), path
    claim = re.search(
        r"storageUri: pvc://([\w-]+)/", (KSERVE_DIR / "inferenceservice-addition.yaml").read_text()
    )
    assert f"name: {claim.group(1)}" in text, "the script fills the claim the InferenceService reads"
