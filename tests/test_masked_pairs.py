"""Training pairs masked as the server masks what the model reads (training.masked_pairs, s2s train --mask-spans)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from contract.masking import mask, restore
from training.masked_pairs import mask_pair, mask_pairs

PAIRS = [
    ("%(name)s is here", "%(name)s はここ", ("{0} is here", "{0} はここ")),
    ("<b>Save</b>", "<b>保存</b>", ("Save", "保存")),
    ("See http://x.org/a for %s", "%s は http://x.org/a を参照", ("See {0} for %s", "%s は {0} を参照")),
    ('<a href="x">Go</a> now', '今 <a href="x">行く</a>', ("{0}Go{1} now", "今 {0}行く{1}")),
    (
        "Zone '{zone}' {state} for '{source}'",
        "ゾーン '{zone}' を '{source}' に対して {state}",
        ("Zone '{0}' {1} for '{2}'", "ゾーン '{0}' を '{2}' に対して {1}"),
    ),
    ("Copy {0} to %(dir)s", "{0} を %(dir)s にコピー", ("Copy {0} to {1}", "{0} を {1} にコピー")),
]


@pytest.mark.parametrize("source,target,want", PAIRS)
def test_both_sides_get_the_servers_stand_ins(source, target, want):
    pair, changed = mask_pair(source, target)
    assert pair == want and changed
    # The model reads in training what the server gives it for the same source ...
    assert pair[0] == mask(source).text
    # ... and the server's repair turns the masked reference back into the reference.
    assert restore(mask(source), pair[1]) == target


@pytest.mark.parametrize(
    "source,target",
    [
        ("Hello", "こんにちは"),  # no span
        ("%d files, %s left", "%d 個のファイル、残り %s"),  # only spans the model copies as they are
        ("Page 3 of 10", "10 ページ中 3 ページ"),  # numbers stay as they are
        ("See http://x.org/a", "参照してください"),  # the target lost the URL: no alignment to teach
        ("<b>Save</b>", "保存"),  # the tags frame the source, not the target
        ("http://x.org", "http://x.org"),  # nothing to translate: the server answers it as sent
    ],
)
def test_pairs_the_server_would_not_change_or_that_cannot_be_aligned_stay_as_they_came(source, target):
    assert mask_pair(source, target) == ((source, target), False)


def test_mask_pairs_counts_only_the_pairs_it_changed():
    pairs = [(s, t) for s, t, _ in PAIRS] + [("Hello", "こんにちは"), ("%d files", "%d 個のファイル")]
    out, changed = mask_pairs(pairs)
    assert changed == len(PAIRS)
    assert out[: len(PAIRS)] == [w for _, _, w in PAIRS] and out[len(PAIRS) :] == pairs[len(PAIRS) :]


def test_train_mask_spans_masks_training_and_validation_pairs_not_the_test_split(tmp_path: Path):
    rows = [
        (f"Open %(item{i})s in folder {i}", f"フォルダ {i} で %(item{i})s を開く") for i in range(300)
    ] + [(f"Save file number {i}", f"ファイル {i} を保存") for i in range(300)]
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    out = tmp_path / "run"
    run = subprocess.run(
        [sys.executable, "-m", "s2s.cli", "train", "--task", "translation", "--data", str(data)]
        + ["--vocab-size", "200", "--d-model", "32", "--n-heads", "2", "--n-layers", "1", "--d-ff", "64"]
        + ["--max-len", "32", "--batch-size", "32", "--max-steps", "2", "--eval-max", "4", "--threads", "1"]
        + ["--mask-spans", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = {
        name: (out / f"data/{name}.tsv").read_text(encoding="utf-8") for name in ("train", "valid", "test")
    }
    masked = sum(lines[n].count("%(item") for n in ("train", "valid"))
    assert masked == 0 and lines["train"].count("{0}") > 100
    # The test split is scored as users send it: raw, through the server's own masking.
    assert "%(item" in lines["test"] and "{0}" not in lines["test"]
    said = re.search(r"--mask-spans: (\d+) training and (\d+) validation pairs masked", run.stdout)
    assert said, run.stdout[-2000:]
    for name, n in zip(("train", "valid"), said.groups()):
        assert int(n) == sum("{0}" in line for line in lines[name].splitlines()), name
