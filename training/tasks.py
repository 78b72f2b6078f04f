"""The tasks: addition, copy, reverse (the seeds' experiments) and translation from a parallel TSV.

Each task yields (source, target) text pairs split into train/valid/test deterministically, so
a test problem never appears in training and the same seed gives the same split everywhere.
"""

from __future__ import annotations

import csv
import hashlib
import random
import string
from dataclasses import dataclass
from pathlib import Path

Pair = tuple[str, str]
TASKS = ("addition", "copy", "reverse", "translation")
SYMBOLS = string.ascii_lowercase  # alphabet of the copy/reverse tasks


@dataclass
class Splits:
    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("train", "valid", "test"):
            write_tsv(folder / f"{name}.tsv", getattr(self, name))


def addition(digits: int, n_train: int, n_valid: int, n_test: int, seed: int) -> Splits:
    """`a+b` -> decimal sum, a and b in [0, 10^digits), no leading zeros, no spaces.

    Problems come from three equal parts: uniform pairs; pairs whose operand digit counts are
    uniform (uniform sampling alone shows a one-digit sum once in 10,000 problems, and a model
    trained that way answered "1+1" with "112"); and carry chains, where every column sums to 9
    (it passes a carry on), to 10 or more (it makes one) or anything, a third each. The sum is
    written most significant digit first, so its first digit depends on every carry below it:
    uniform pairs have a column sum of 9 one time in ten, and a model trained on them alone
    answered `109+91` with 100 and `961+38` with 1099. Valid and test problems are distinct and take at
    most a tenth of each (digits of a, digits of b) cell, so the short cells (only 100 one-digit
    pairs exist) stay mostly for training, where they are drawn with replacement. No held-out
    problem appears in training.
    """
    space = 10 ** (2 * digits)
    n_held = n_valid + n_test
    if n_held > space // 20:
        raise ValueError(f"{n_held} held-out problems requested; {digits}-digit operands allow {space // 20}")
    rng = random.Random(seed)

    def n_digits(x: int) -> int:
        return len(str(x))

    def carry_chain() -> tuple[int, int]:
        a = b = 0
        for col in range(digits):
            da, kind = rng.randrange(10), rng.randrange(3)
            if kind == 0:  # passes a carry on
                db = 9 - da
            elif kind == 1 and da > 0:  # makes a carry
                db = rng.randrange(10 - da, 10)
            else:
                db = rng.randrange(10)
            a, b = a + da * 10**col, b + db * 10**col
        return (a, b) if rng.random() < 0.5 else (b, a)

    def draw() -> tuple[int, int]:
        part = rng.randrange(3)
        if part == 0:
            return rng.randrange(10**digits), rng.randrange(10**digits)
        if part == 1:
            return carry_chain()
        da, db = rng.randint(1, digits), rng.randint(1, digits)
        low = lambda d: 10 ** (d - 1) if d > 1 else 0  # noqa: E731
        return rng.randrange(low(da), 10**da), rng.randrange(low(db), 10**db)

    def cell_size(d: int) -> int:
        return 10 if d == 1 else 9 * 10 ** (d - 1)

    held: dict[tuple[int, int], None] = {}  # insertion-ordered set
    per_cell: dict[tuple[int, int], int] = {}
    while len(held) < n_held:
        ab = draw()
        cell = (n_digits(ab[0]), n_digits(ab[1]))
        if ab in held or per_cell.get(cell, 0) >= cell_size(cell[0]) * cell_size(cell[1]) // 10:
            continue
        held[ab] = None
        per_cell[cell] = per_cell.get(cell, 0) + 1
    train: list[tuple[int, int]] = []
    while len(train) < n_train:
        ab = draw()
        if ab not in held:
            train.append(ab)
    fmt = lambda ab: (f"{ab[0]}+{ab[1]}", str(ab[0] + ab[1]))  # noqa: E731
    held_pairs = [fmt(ab) for ab in held]
    return Splits([fmt(ab) for ab in train], held_pairs[:n_valid], held_pairs[n_valid:])


def symbols(
    kind: str, min_len: int, max_len: int, n_train: int, n_valid: int, n_test: int, seed: int
) -> Splits:
    """copy: target = source; reverse: target = source reversed. Sources are random letter strings."""
    rng = random.Random(seed)
    seen: set[str] = set()
    total = n_train + n_valid + n_test
    while len(seen) < total:  # distinct sources keep the splits disjoint
        seen.add("".join(rng.choices(SYMBOLS, k=rng.randint(min_len, max_len))))
    srcs = sorted(seen)
    rng.shuffle(srcs)
    pairs = [(s, s if kind == "copy" else s[::-1]) for s in srcs]
    return Splits(pairs[:n_train], pairs[n_train : n_train + n_valid], pairs[n_train + n_valid :])


def split_of(source: str, valid_per_mille: int = 25, test_per_mille: int = 25) -> str:
    """A stable split by a hash of the source side: the same sentence lands in the same split
    however the corpus is ordered or grown, and duplicates never straddle splits."""
    bucket = int.from_bytes(hashlib.sha256(source.encode("utf-8")).digest()[:4], "big") % 1000
    if bucket < test_per_mille:
        return "test"
    if bucket < test_per_mille + valid_per_mille:
        return "valid"
    return "train"


def translation(*paths: Path) -> Splits:
    """Parallel TSVs `source<TAB>target[<TAB>ignored...]` (Tatoeba/ManyThings format), split by hash.

    Several files (a corpus kept in one file per licence) are read in the order given."""
    out: dict[str, list[Pair]] = {"train": [], "valid": [], "test": []}
    for path in paths:
        for src, tgt in read_tsv(path):
            out[split_of(src)].append((src, tgt))
    return Splits(out["train"], out["valid"], out["test"])


def read_tsv(path: Path) -> list[Pair]:
    pairs = []
    with open(path, encoding="utf-8", newline="") as f:
        for lineno, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if not row or not row[0].strip():
                continue
            if len(row) < 2:
                raise ValueError(f"{path}:{lineno}: expected source<TAB>target, got one column")
            pairs.append((row[0].strip(), row[1].strip()))
    return pairs


def write_tsv(path: Path, pairs: list[Pair]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        for src, tgt in pairs:
            f.write(f"{src}\t{tgt}\n")
