"""The training CLI end to end: checkpoints, --resume, data-parallel torchrun."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training import checkpoint

TINY = [
    "--task",
    "addition",
    "--digits",
    "2",
    "--n-train",
    "400",
    "--n-valid",
    "40",
    "--n-test",
    "40",
    "--d-model",
    "32",
    "--n-heads",
    "2",
    "--n-layers",
    "1",
    "--d-ff",
    "64",
    "--max-len",
    "12",
    "--batch-size",
    "32",
    "--warmup",
    "50",
    "--eval-max",
    "40",
    "--threads",
    "1",
]


def s2s(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "s2s.cli", *args], capture_output=True, text=True, check=True, env=env
    )


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory) -> Path:
    """One epoch of TINY: the run folder the tests below read, resume (a copy) or start from."""
    out = tmp_path_factory.mktemp("train") / "one-epoch"
    s2s("train", *TINY, "--epochs", "1", "--out", str(out))
    return out


def test_resume_continues_from_the_same_state(tmp_path: Path, one_epoch: Path):
    s2s("train", *TINY, "--epochs", "2", "--out", str(tmp_path / "straight"))
    shutil.copytree(one_epoch, tmp_path / "resumed")
    s2s("train", *TINY, "--epochs", "2", "--resume", "--out", str(tmp_path / "resumed"))
    a = load_file(str(tmp_path / "straight/last/model.safetensors"))
    b = load_file(str(tmp_path / "resumed/last/model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k
    log = [json.loads(x) for x in (tmp_path / "resumed/metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2]
    # The checkpoint describes itself: it loads with nothing but its folder.
    ckpt = checkpoint.load(tmp_path / "straight/best")
    assert ckpt.task.name == "addition" and ckpt.config.d_model == 32
    assert (tmp_path / "straight/learning_curves.png").stat().st_size > 10_000
    assert {"valid_seq_acc", "valid_token_acc", "valid_loss", "train_seq_acc"} <= set(log[-1])


def test_init_from_continues_the_schedule_from_the_checkpoints_weights(tmp_path: Path, one_epoch: Path):
    """--init-from: a run folder that lost its trainer state goes on from the weights alone — the step,
    epoch and minutes count on from the checkpoint's, and the rate ramps back up to the schedule."""
    first = json.loads((one_epoch / "last/metrics.json").read_text())
    s2s(
        "train",
        *TINY,
        "--epochs",
        "3",
        "--init-from",
        str(one_epoch / "last"),
        "--init-warmup",
        "10",
        "--out",
        str(tmp_path / "second"),
    )
    log = [json.loads(x) for x in (tmp_path / "second/metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2, 3] and log[0]["step"] == first["step"]
    assert log[-1]["step"] == 3 * first["step"] and log[-1]["time_s"] > first["time_s"]
    steps = [json.loads(x) for x in (tmp_path / "second/steps.jsonl").read_text().splitlines()]
    assert steps[0]["step"] > first["step"]
    # Ramped: the first logged rate (the one for step + 1) is below the schedule's, later ones follow it again.
    from training.schedule import rate

    cfg = dict(d_model=32, warmup=50, factor=1.0)
    assert steps[0]["lr"] < 0.9 * rate(steps[0]["step"] + 1, **cfg)
    assert steps[-1]["lr"] == pytest.approx(rate(steps[-1]["step"] + 1, **cfg))
    a, b = (
        load_file(str(one_epoch / "last/model.safetensors")),
        load_file(str(tmp_path / "second/last/model.safetensors")),
    )
    assert any(not torch.equal(a[k], b[k]) for k in a)  # it trained on
    with pytest.raises(subprocess.CalledProcessError) as refused:
        s2s(
            "train",
            *TINY,
            "--resume",
            "--init-from",
            str(one_epoch / "last"),
            "--out",
            str(tmp_path / "second"),
        )
    assert refused.value.returncode == 2 and "exclude each other" in refused.value.stderr
    assert "Traceback" not in refused.value.stderr
    with pytest.raises(
        subprocess.CalledProcessError
    ) as refused:  # not a checkpoint: named before any data is read
        s2s("train", *TINY, "--init-from", str(tmp_path), "--out", str(tmp_path / "third"))
    assert refused.value.returncode == 2 and "metrics.json missing" in refused.value.stderr
    assert "Traceback" not in refused.value.stderr


def test_eval_cli_prints_metrics_json(one_epoch: Path):
    out = s2s("eval", str(one_epoch / "best"), "--data", str(one_epoch / "data/test.tsv"))
    metrics = json.loads(out.stdout)
    assert metrics["n"] == 40 and 0.0 <= metrics["seq_acc"] <= 1.0 and metrics["loss"] > 0


@pytest.mark.slow
def test_two_process_torchrun_stays_in_sync(tmp_path: Path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "s2s.cli",
            "train",
            *TINY,
            "--epochs",
            "2",
            "--out",
            str(tmp_path / "ddp"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "replicas in sync: True" in out.stdout
    summary = json.loads((tmp_path / "ddp/summary.json").read_text())
    assert summary["world"] == 2 and summary["replicas_in_sync"] is True and summary["epochs"] == 2


def test_max_steps_and_checkpoint_averaging(tmp_path: Path):
    """--max-steps stops at that step (the partial epoch is evaluated and saved); --average-every
    keeps weight copies and averaged/ holds their mean (§6.1), a loadable checkpoint."""
    out = tmp_path / "run"
    s2s(
        "train",
        *TINY,
        "--epochs",
        "5",
        "--max-steps",
        "20",
        "--average-every",
        "5",
        "--average-last",
        "3",
        "--batch-tokens",
        "120",
        "--out",
        str(out),
    )
    log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == 20 and log[-1]["train_tgt_tokens_per_s"] > 0
    copies = sorted(int(f.stem.split("-")[1]) for f in (out / "averaging").glob("step-*.safetensors"))
    assert copies == [10, 15, 20]
    avg = load_file(str(out / "averaged/model.safetensors"))
    kept = [load_file(str(out / f"averaging/step-{s}.safetensors")) for s in copies]
    for k in avg:
        assert torch.allclose(avg[k], sum(c[k] for c in kept) / 3, atol=1e-6), k
    assert checkpoint.load(out / "averaged").config.d_model == 32
    assert json.loads((out / "averaged/metrics.json").read_text())["averaged_steps"] == [10, 15, 20]


def test_precision_is_chosen_by_the_hardware_and_explained():
    from training.precision import bf16_is_fast, resolve_precision

    fast, why = bf16_is_fast("cpu")
    assert isinstance(fast, bool) and why
    dtype, reason = resolve_precision("auto", "cpu")
    assert (dtype is not None) == fast and why in reason
    assert resolve_precision("fp32", "cpu")[0] is None
    assert resolve_precision("bf16", "cpu")[0] == torch.bfloat16
    with pytest.raises(SystemExit, match="--precision"):
        resolve_precision("fp16", "cpu")


def test_norm_pre_trains_a_pre_norm_model_with_a_final_norm(tmp_path: Path):
    """--norm pre: x + Sublayer(LayerNorm(x)) and a LayerNorm after each stack, recorded in the checkpoint."""
    out = tmp_path / "pre"
    s2s("train", *TINY, "--epochs", "1", "--norm", "pre", "--out", str(out))
    config = checkpoint.load(out / "best").config
    assert config.norm == "pre" and config.final_norm
    weights = load_file(str(out / "best/model.safetensors"))
    assert {"encoder_norm.weight", "decoder_norm.weight"} <= set(weights)


@pytest.mark.parametrize(
    "flags,said",
    [
        (["--norm", "sandwich"], "--norm must be post or pre, not 'sandwich'"),
        (["--mask-spans"], "--mask-spans masks translation pairs; --task addition has none"),
    ],
)
def test_flags_that_cannot_work_are_refused_without_a_traceback(tmp_path: Path, flags, said):
    run = subprocess.run(
        [sys.executable, "-m", "s2s.cli", "train", *TINY, *flags, "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and said in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "x").exists()
