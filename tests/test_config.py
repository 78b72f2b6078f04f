"""`s2s serve` configuration: flags over S2S_* environment variables over defaults, bad values refused by name."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from conftest import MODEL_REPO

from server.config import ServerConfig, add_arguments, from_args


def parse(argv: list[str], env: dict[str, str] | None = None) -> ServerConfig:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return from_args(p.parse_args(argv), env or {})


def test_defaults_are_tritons_ports_and_the_measured_cpu_settings():
    c = parse([])
    assert (c.port, c.metrics_port, c.model_repo) == (8001, 8002, Path("models"))
    assert (c.intra_op_threads, c.io_binding, c.scheduler.mode, c.scheduler.max_batch_size) == (
        1,
        "auto",
        "continuous",
        64,
    )


def test_flags_win_over_environment_which_wins_over_defaults():
    env = {
        "S2S_PORT": "9001",
        "S2S_MAX_BATCH_SIZE": "32",
        "S2S_IO_BINDING": "off",
        "S2S_MODELS": "addition, translate-en-ja:1",
    }
    c = parse(["--port", "9100"], env)
    assert c.port == 9100  # flag
    assert c.scheduler.max_batch_size == 32 and c.io_binding == "off"  # environment
    assert c.greedy_screen == "auto" and parse(["--greedy-screen", "off"]).greedy_screen == "off"
    assert parse([], {"S2S_GREEDY_SCREEN": "on"}).greedy_screen == "on"
    assert c.models == ("addition", "translate-en-ja:1") and c.metrics_port == 8002  # parsed list; default


def test_model_control_flags():
    """Triton's flags: --load-model repeats (or takes a comma-separated list, as its variable must)."""
    c = parse(["--model-control-mode", "explicit", "--load-model", "addition", "--load-model", "a:2@1, b"])
    assert (c.model_control_mode, c.load_model, c.repository_poll_secs) == (
        "explicit",
        ("addition", "a:2@1", "b"),
        15.0,
    )
    c = parse([], {"S2S_MODEL_CONTROL_MODE": "explicit", "S2S_LOAD_MODEL": "addition,translate-en-ja"})
    assert c.load_model == ("addition", "translate-en-ja")
    assert (
        parse(["--model-control-mode", "poll", "--repository-poll-secs", "2.5"]).repository_poll_secs == 2.5
    )
    assert parse([]).model_control_mode == "none"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batching", "dynamic"], "--batching must be continuous, request or none"),
        (["--io-binding", "yes"], "--io-binding must be auto, on or off"),
        (["--greedy-screen", "true"], "--greedy-screen must be auto, on or off"),
        (["--tls-cert", "server.pem"], "--tls-cert and --tls-key go together"),
        (["--model-control-mode", "auto"], "--model-control-mode must be none, explicit or poll"),
        (["--load-model", "addition"], "--load-model needs --model-control-mode explicit"),
        (
            ["--model-control-mode", "explicit", "--models", "addition"],
            "in explicit mode name the models to load at start",
        ),
        (
            ["--model-control-mode", "poll", "--repository-poll-secs", "0"],
            "--repository-poll-secs must be positive",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_choices(argv, message):
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert message in str(e.value)


def test_default_engine_cores_follow_the_cgroup_cpu_quota(tmp_path):
    """Affinity shows a node's CPUs; a container's quota (docker --cpus, a Kubernetes limit) is what it may use."""
    import os

    from server.core_client.sizing import usable_cpus
    from server.models.disk import parse_model

    cpus = len(os.sched_getaffinity(0))
    assert usable_cpus(tmp_path) == (cpus, f"{cpus} usable CPU cores")  # no cgroup files: affinity
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(tmp_path)[0] == cpus
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU: one engine core
    assert usable_cpus(tmp_path) == (1, "cgroup CPU quota 0.5")
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert usable_cpus(v1)[0] == 1
    assert parse_model("translate-en-ja:1@2") == ("translate-en-ja", "1", 2)

    assert parse_model("addition") == ("addition", "", None)
    for bad in ("addition@0", "addition@x", "addition:v1"):
        with pytest.raises(Exception, match="--models"):
            parse_model(bad)


@pytest.mark.parametrize("cpus,cores", [(1, 1), (2, 1), (3, 2), (4, 2), (8, 5), (16, 11)])
def test_default_engine_cores_leave_the_front_end_its_share(monkeypatch, cpus, cores):
    """On a CPU the cores get the usable CPUs less the front end's share, never fewer than one; the reason says so."""
    from server.core_client import sizing

    monkeypatch.setattr(sizing, "usable_cpus", lambda: (cpus, f"{cpus} usable CPU cores"))
    n, why = sizing.default_cores(ServerConfig(device="cpu"))
    assert n == cores
    assert why.startswith(f"{cpus} usable CPU cores, less the front end's share")


@pytest.mark.parametrize("cpus", [1, 2, 4])
def test_a_beam_default_model_gets_a_core_per_cpu(monkeypatch, cpus):
    """A model served with a beam by default: one engine core per CPU (its decoding, not the front end, is the
    bottleneck); the reason names the beam."""
    from server.core_client import sizing

    monkeypatch.setattr(sizing, "usable_cpus", lambda: (cpus, f"{cpus} usable CPU cores"))
    n, why = sizing.default_cores(ServerConfig(device="cpu"), beam=4)
    assert n == cpus and "a beam of 4" in why


def test_default_beam_reads_the_bundle(tmp_path):
    from server.core_client.sizing import default_beam

    assert default_beam(MODEL_REPO / "translate-en-ja" / "1") == 4
    assert default_beam(MODEL_REPO / "addition" / "1") == 1
    assert default_beam(tmp_path) == 1  # no bundle: its load says why
