"""Shared fixtures: the committed model repository and a real gRPC server on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import traceback
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from local_serve import free_port, serve_cmd  # noqa: F401  (re-exported to the tests)

ROOT = Path(__file__).resolve().parents[1]
# The committed default models; a test run can point elsewhere (e.g. while models are rebuilt).
MODEL_REPO = Path(os.environ.get("S2S_TEST_MODEL_REPO", ROOT / "models"))
CHECKPOINTS = Path(os.environ.get("S2S_TEST_CHECKPOINTS", ROOT / "checkpoints"))
DEFAULT_MODELS = ("addition", "translate-en-ja")


def served_version(name: str, repo: Path = MODEL_REPO) -> Path:
    """The version folder of ``name`` that `s2s serve` serves by default: the latest on disk (what answers are
    compared with)."""
    from server.models.disk import versions_on_disk

    versions = versions_on_disk(repo / name) if (repo / name).is_dir() else []
    assert versions, f"no version of {name} in {repo}"
    return repo / name / str(versions[-1])


def english(n: int) -> list[str]:
    """The first n held-out English sentences of the en->ja test split."""
    rows = (CHECKPOINTS / "translate-en-ja" / "test.tsv").read_text(encoding="utf-8").splitlines()
    return [r.split("\t")[0] for r in rows[:n]]


def decode(
    t, texts: list[str], max_new_tokens: int | None = None, beam: int = 1, batch_size: int = 64
) -> list[str]:
    """Texts decoded by the engine's step loop (``engine.drive.run``) with a plain beam or greedy search and
    no decoding options: the engine below its ``generate`` API."""
    from engine.drive import run
    from engine.sequence import Sequence

    seqs = [
        Sequence(t.codec.source_ids(s), max_new_tokens or t.config.task.max_new_tokens, beam) for s in texts
    ]
    run(t.runner, seqs, batch_size)
    return [t.codec.decode(s.result) for s in seqs]


def decode_no_cache(t, texts: list[str], max_new_tokens: int | None = None) -> list[str]:
    """Greedy decoding with no KV cache, the oracle of the cached path: the whole prefix is fed again at every step
    with an empty cache, each output cut at the engine's budget (min(budget, source length + 50, max_len - 1))."""
    import numpy as np

    from engine.step_loop import pad_batch

    r, sp = t.runner, t.runner.special
    budget = max_new_tokens or t.config.task.max_new_tokens
    src = [t.codec.source_ids(s) for s in texts]
    caps = [min(budget, len(s) + 50, t.config.model.max_len - 1) for s in src]
    ids, mask = pad_batch(src, sp.pad)
    cross, b = r.encode(ids, mask), len(texts)
    tgt = np.full((b, 1), sp.bos, np.int64)
    empty = [np.zeros((b, r.n_heads, 0, r.d_head), np.float32)] * (2 * r.n_layers)
    for _ in range(max(caps)):
        positions = np.broadcast_to(np.arange(tgt.shape[1]), tgt.shape).copy()
        logits, _ = r.decode(tgt, positions, np.zeros((b, 0), np.int64), empty, cross, mask)
        tgt = np.concatenate([tgt, logits[:, -1].argmax(-1)[:, None]], axis=1)
        if (tgt[:, 1:] == sp.eos).any(axis=1).all():
            break
    return [t.codec.decode(row[:cap]) for row, cap in zip(tgt[:, 1:].tolist(), caps)]


def wait_for(pred, timeout: float = 10.0) -> bool:
    """Poll pred every 50 ms until it holds (True) or the timeout passes (False)."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A throwaway key and certificate for localhost and 127.0.0.1 (openssl)."""
    import subprocess

    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class ServerThread:
    """The real server (grpc.aio + scheduler threads + /metrics) on its own event loop thread."""

    def __init__(self, config):
        from server.app import start

        self.config = config
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.running = asyncio.run_coroutine_threadsafe(start(config), self.loop).result(60)
        self.address = f"127.0.0.1:{self.running.port}"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.running.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def server_config(**overrides):
    from server.config import SchedulerConfig, ServerConfig

    sched = overrides.pop("scheduler", SchedulerConfig())
    base = ServerConfig(
        model_repo=MODEL_REPO,
        host="127.0.0.1",
        port=0,
        metrics_port=free_port(),
        http_port=free_port(),
        grace_s=5.0,
        scheduler=sched,
    )
    return dataclasses.replace(base, **overrides)


@pytest.fixture(scope="session")
def model_repo() -> Path:
    if not (MODEL_REPO / "addition").is_dir():
        pytest.fail(f"no model repository at {MODEL_REPO}: run `make models` or set S2S_TEST_MODEL_REPO")
    return MODEL_REPO


@pytest.fixture(scope="module")
def server(model_repo):
    """A server on the committed models with default settings, shared by a test module."""
    srv = ServerThread(server_config())
    yield srv
    srv.stop()


class _Tracebacks(logging.Handler):
    """Log records with a traceback from the in-process servers' loggers (the child-process servers' logs are
    read by their own tests): client input never leaves a traceback in a server log."""

    SERVER = ("s2s", "aiohttp")  # the server's own loggers and its HTTP server's
    LIBRARIES = ("asyncio", "grpc")  # shared with the tests' clients: only the server's errors count

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not record.exc_info or not record.exc_info[0]:
            return
        kind, _, tb = record.exc_info
        frames = [frame.filename for frame in traceback.extract_tb(tb)]
        if any(f"{os.sep}tests{os.sep}" in f for f in frames):
            return  # a fault the test injected on purpose (a failing engine), not client input
        ours = kind.__module__.startswith("server") or any(f"{os.sep}server{os.sep}" in f for f in frames)
        if record.name.startswith(self.SERVER) or (record.name.startswith(self.LIBRARIES) and ours):
            self.records.append(record)


_TRACEBACKS = _Tracebacks()
logging.getLogger().addHandler(_TRACEBACKS)


@pytest.fixture(autouse=True)
def no_server_traceback():
    """Fails the test during which a server logged a traceback."""
    start = len(_TRACEBACKS.records)
    yield
    new = _TRACEBACKS.records[start:]
    assert not new, "server logged a traceback:\n" + "\n".join(
        f"{r.name}: {r.getMessage()}\n{logging.Formatter().formatException(r.exc_info)}" for r in new
    )


def shell_examples(markdown: str, where: str) -> list[tuple[str, str]]:
    """The ```sh commands of a document, each with the text its `# -> ` line says its output holds; a command
    with no such line after it fails the collection (``where`` names the document in that message)."""
    import re

    out = []
    for block in re.findall(r"```sh\n(.*?)```", markdown, re.S):
        command: list[str] = []
        for line in block.splitlines():
            if line.startswith("# -> "):
                out.append(("\n".join(command), line[len("# -> ") :]))
                command = []
            elif line.strip():
                command.append(line)
        assert not command, f"a command in {where} has no '# -> ' line after it: {command}"
    return out


class Served:
    """`s2s serve` in a child process; its combined stdout/stderr goes to a file the tests read."""

    def __init__(self, tmp: Path, *args: str):
        self.port, self.metrics_port, self.http_port = free_port(), free_port(), free_port()
        self.log_path = tmp / "server.log"
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            serve_cmd(MODEL_REPO, self.port, self.http_port, self.metrics_port, *args),
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        self.address = f"127.0.0.1:{self.port}"
        with grpc.insecure_channel(self.address) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            end = time.monotonic() + 60
            while True:
                try:
                    if (
                        stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                        == health_pb2.HealthCheckResponse.SERVING
                    ):
                        break
                except grpc.RpcError:
                    pass
                assert time.monotonic() < end and self.proc.poll() is None, self.log()
                time.sleep(0.1)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def log(self) -> str:
        self.log_file.flush()
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            self.proc.kill()
            self.log_file.close()


def assert_no_traceback(log: str) -> None:
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def make_repo(root: Path, other: bool = True) -> Path:
    """A model repository of its own under ``root``: addition's version 1 copied (versions may be added to it),
    and translate-en-ja's files linked."""
    ADD, JA = DEFAULT_MODELS
    repo = root / "models"
    (repo / ADD).mkdir(parents=True)
    shutil.copytree(MODEL_REPO / ADD / "1", repo / ADD / "1")
    if other:  # its files linked, not its folder: a model folder that links outside the repository is refused
        for version in (MODEL_REPO / JA).iterdir():
            (repo / JA / version.name).mkdir(parents=True)
            for f in version.iterdir():
                (repo / JA / version.name / f.name).symlink_to(f.resolve())
    return repo


@pytest.fixture(scope="session")
def m2m100(tmp_path_factory):
    """A tiny trained M2M100 checkpoint (tests/m2m100_models.py: its answer depends on the target language) and
    its `s2s import` bundle, made once a session: (model, tokenizer, bundle folder, rows)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import m2m100_models as mm

    from export.hf_import import ImportOptions, import_model

    root = tmp_path_factory.mktemp("m2m100")
    model, tok, rows = mm.make(root / "ckpt")
    folder = import_model(ImportOptions(root / "ckpt", root / "repo", "m2m"))
    return model, tok, folder, rows


def link_model(repo: Path, name: str, folder: Path) -> None:
    """A model version's files linked into ``repo/name/<its version>/`` (its folder stays inside the repository)."""
    (repo / name / folder.name).mkdir(parents=True)
    for f in folder.iterdir():
        (repo / name / folder.name / f.name).symlink_to(f.resolve())


@pytest.fixture(scope="session")
def multilingual_server(m2m100, tmp_path_factory):
    """One server for the session holding the tiny multilingual model (``m2m``, 100 languages) and the committed
    translate-en-ja, one engine core each."""
    repo = tmp_path_factory.mktemp("multilingual") / "models"
    link_model(repo, "m2m", m2m100[2])
    link_model(repo, DEFAULT_MODELS[1], MODEL_REPO / DEFAULT_MODELS[1] / "1")
    srv = ServerThread(server_config(model_repo=repo, instances=1))
    yield srv
    srv.stop()
