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

    Half the problems are uniform over all pairs; half first pick each operand's digit count
    uniformly. Uniform sampling alone almost never shows short operands (both one-digit: 1 in
    10,000), and a model trained that way answers "1+1" with "112". Problems are distinct, so
    the three splits are disjoint by construction.
    """
    space = 10 ** (2 * digits)
    total = n_train + n_valid + n_test
    if total > space // 2:
        raise ValueError(f"{total} problems requested but {digits}-digit operands give only {space} pairs")
    rng = random.Random(seed)

    def operand(n_digits: int) -> int:
        return rng.randrange(10 ** (n_digits - 1) if n_digits > 1 else 0, 10**n_digits)

    seen: set[tuple[int, int]] = set()
    problems: list[tuple[int, int]] = []
    while len(problems) < total:
        if rng.random() < 0.5:
            ab = (rng.randrange(10**digits), rng.randrange(10**digits))
        else:
            ab = (operand(rng.randint(1, digits)), operand(rng.randint(1, digits)))
        if ab not in seen:  # short-operand cells run out; the uniform half then fills in
            seen.add(ab)
            problems.append(ab)
    pairs = [(f"{a}+{b}", str(a + b)) for a, b in problems]
    return Splits(pairs[:n_train], pairs[n_train : n_train + n_valid], pairs[n_train + n_valid :])


def symbols(kind: str, min_len: int, max_len: int, n_train: int, n_valid: int, n_test: int, seed: int) -> Splits:
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


def translation(path: Path) -> Splits:
    """A parallel TSV `source<TAB>target[<TAB>ignored...]` (Tatoeba/ManyThings format), split by hash."""
    out: dict[str, list[Pair]] = {"train": [], "valid": [], "test": []}
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
