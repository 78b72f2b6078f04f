"""deploy/kserve/ as KServe would run it, without a cluster: the ClusterServingRuntime's container with KServe's
template fields filled in, a model laid out at a /mnt/models stand-in as KServe's storage layer leaves a
storageUri, the container's args started as a process, and a real Prometheus scraping it. Read by
tests/test_deploy_kserve.py (offline) and tests/test_kserve_runtime.py (the runtime run for real).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from conftest import MODEL_REPO, ROOT, free_port

KSERVE_DIR = ROOT / "deploy" / "kserve"
RUNTIME = KSERVE_DIR / "servingruntime.yaml"
MOUNT = "/mnt/models"  # KServe's DefaultModelLocalMountPath (pkg/constants/constants.go)
POD_GRACE_DEFAULT_S = 30  # Kubernetes' terminationGracePeriodSeconds when a pod sets none


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def runtime() -> dict:
    (doc,) = documents(RUNTIME)
    return doc


def inference_services() -> dict[str, dict]:
    """name -> InferenceService, every one of deploy/kserve/."""
    out = {}
    for path in sorted(KSERVE_DIR.glob("*.yaml")):
        for doc in documents(path):
            if doc.get("kind") == "InferenceService":
                out[doc["metadata"]["name"]] = doc
    return out


# ---- KServe's part: the template fields, the storage layout ----------------------------------------------


def fill_template(container: dict, metadata: dict) -> dict:
    """What KServe's ReplacePlaceholders does to a runtime's container (pkg/controller/v1beta1/inferenceservice/
    utils/utils.go): the container, as JSON, run through a Go template with the InferenceService's ObjectMeta.
    Only ``{{.Field}}`` of ObjectMeta's string fields here; anything else fails, as it would not mean the same."""
    fields = {"Name": metadata["name"], "Namespace": metadata.get("namespace", "default")}

    def field(m: re.Match) -> str:
        assert m.group(1) in fields, f"template field {m.group(0)} is not one this test fills in"
        return fields[m.group(1)]

    text = re.sub(r"\{\{\s*\.(\w+)\s*\}\}", field, json.dumps(container))
    assert "{{" not in text, text
    return json.loads(text)


def storage_files(uri: str, store: Path = MODEL_REPO) -> dict[str, Path]:
    """Where each file of a storageUri lands under /mnt/models, ``store`` standing for the bucket or the claim (both
    hold a model repository, as deploy/k8s/pvc.yaml says to fill the claim). pvc://CLAIM/PATH: KServe mounts PATH of
    the claim at /mnt/models (storage_initializer_injector.go, SubPath). s3://BUCKET/PREFIX: the storage
    initializer downloads every object whose key starts with PREFIX to its key less PREFIX (kserve_storage.py,
    _download_s3)."""
    scheme, _, rest = uri.partition("://")
    _bucket, _, path = rest.partition("/")
    if scheme == "pvc":
        top = store / path.strip("/")
        return {f.relative_to(top).as_posix(): f for f in sorted(top.rglob("*")) if f.is_file()}
    assert scheme == "s3", uri
    out = {}
    for f in sorted(store.rglob("*")):
        key = f.relative_to(store).as_posix()
        if f.is_file() and key.startswith(path):
            out[f.name if key == path else key.removeprefix(path).lstrip("/")] = f
    return out


def served_bundle(files: dict[str, str | Path]) -> str:
    """The bundle folder (relative to /mnt/models) `s2s serve --model-name` serves from such a layout."""
    if "config.json" in files:
        return ""
    versions = {name.split("/")[0] for name in files if re.fullmatch(r"\d+/config\.json", name)}
    assert versions, f"neither a bundle nor a model folder: {sorted(files)}"
    return max(versions, key=int)


def lay_out(uri: str, mnt: Path) -> Path:
    """/mnt/models stand-in as KServe leaves it for the model container: the files, read-only."""
    for name, source in storage_files(uri).items():
        (mnt / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, mnt / name)
    for p in sorted(mnt.rglob("*"), reverse=True) + [mnt]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    return mnt


def writable_again(mnt: Path) -> None:
    for p in [mnt, *mnt.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)


# ---- the container, as a process ------------------------------------------------------------------------


@dataclass
class Container:
    """The runtime's container for one InferenceService, started as a process: ``ports`` maps each port the
    manifest declares to the free one it listens on here (tests share one machine)."""

    proc: subprocess.Popen
    spec: dict
    ports: dict[int, int]
    env: dict[str, str]
    log_path: Path

    def port(self, declared: int | str) -> int:
        return self.ports[int(declared)]

    def url(self, probe: dict) -> str:
        get = probe["httpGet"]
        return f"http://127.0.0.1:{self.port(get['port'])}{get['path']}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_probe(self, probe: dict, timeout_s: float = 120) -> None:
        """Until the probe (an httpGet) answers 200, as the kubelet would judge it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (
                f"the container exited with {self.proc.returncode}:\n{self.log()}"
            )
            try:
                with urllib.request.urlopen(self.url(probe), timeout=probe.get("timeoutSeconds", 1)) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"{self.url(probe)} not 200 within {timeout_s:.0f} s:\n{self.log()[-3000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(60)
        finally:
            self.proc.kill()


def declared_ports(spec: dict, annotations: dict) -> set[int]:
    ports = {p["containerPort"] for p in spec["ports"]}
    return ports | {int(annotations["prometheus.kserve.io/port"])}


def start_container(isvc: dict, mnt: Path, log_path: Path) -> Container:
    """The runtime's container for ``isvc``: its args as KServe fills them in, its env with the InferenceService's
    model env over the runtime's (as KServe merges them), /mnt/models at ``mnt``, each declared port on a free one."""
    rt = runtime()
    (spec,) = rt["spec"]["containers"]
    spec = fill_template(spec, isvc["metadata"])
    ports = {p: free_port() for p in declared_ports(spec, rt["spec"]["annotations"])}
    args = []
    for token in spec["args"]:
        flag, eq, value = token.partition("=")
        if eq and value.isdigit() and int(value) in ports:
            token = f"{flag}={ports[int(value)]}"
        args.append(token.replace(MOUNT, str(mnt)))
    assert args[0] == "s2s", "the console script; run here as its module, on this interpreter"
    env = {k: v for k, v in os.environ.items() if not k.startswith("S2S_")}
    model_env = isvc["spec"]["predictor"]["model"].get("env", [])
    env.update({e["name"]: e["value"] for e in spec.get("env", []) + model_env})
    log_file = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "s2s.cli", *args[1:]],
        env=env,
        cwd=ROOT,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    log_file.close()
    return Container(proc, spec, ports, env, log_path)


# ---- a real Prometheus ----------------------------------------------------------------------------------


class Prometheus:
    """Debian's `prometheus`, scraping ``targets`` (host:port) every second at ``path``."""

    def __init__(self, binary: str, tmp: Path, targets: list[str], path: str):
        cfg = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": "s2s", "metrics_path": path, "static_configs": [{"targets": targets}]}
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """The instant vector of ``expr`` (at ``at``, seconds since the epoch, else now); [] while Prometheus starts."""
        args = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        url = f"http://127.0.0.1:{self.port}/api/v1/query?{urllib.parse.urlencode(args)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())["data"]["result"]
        except OSError:
            return []

    def value(self, expr: str, at: float | None = None) -> float | None:
        result = self.query(expr, at)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
