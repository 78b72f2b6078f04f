"""The network-free half of the corpus build: catalogs -> cleaned, deduplicated, sorted rows, split into the
training files and the held-out set, and written as TSV."""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from training.corpus_cleaning import Pair, clean_pair, entry_rejection, read_catalog
from training.corpus_sources import GROUPS, HELDOUT_CAP, is_reserved

try:  # tqdm is in the [train] extra; the build still runs (without bars) if it is missing
    from tqdm import tqdm
except ImportError:  # pragma: no cover

    def tqdm(it=None, **_kw):  # type: ignore[no-redef]
        return it


@dataclass
class SourceStats:
    entries: int = 0  # catalog entries read
    clean: int = 0  # entries surviving every rule
    unique_en: int = 0  # distinct English strings among them
    final: int = 0  # final pairs credited to this source
    rejected: collections.Counter = field(default_factory=collections.Counter)


@dataclass
class BuildResult:
    rows: list[Pair]
    stats: dict[str, SourceStats]
    #: the file (:data:`GROUPS`) of each row: the first group with a source containing that pair
    row_groups: dict[Pair, str] = field(default_factory=dict)
    #: catalogs dropped because they belong to a reserved project (:func:`is_reserved`)
    reserved: list[str] = field(default_factory=list)

    def rows_in(self, group: str) -> list[Pair]:
        return [r for r in self.rows if self.row_groups.get(r, GROUPS[0]) == group]


def choose_translations(counts: dict[str, collections.Counter]) -> dict[str, str]:
    """One Japanese string per English string: the most frequent, ties -> lexicographically smallest."""
    return {en: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for en, c in counts.items()}


def build_rows(
    catalogs: Iterable[Path | str | tuple[str, Path | str]],
    progress: bool = False,
    groups: dict[str, str] | None = None,
) -> BuildResult:
    """The network-free half: catalogs -> cleaned, deduplicated, sorted (english, japanese) rows.

    ``catalogs`` holds paths, or (source name, path) pairs so that the stats are per source.
    Catalogs are read in sorted order within each source, so the result does not depend on the
    order the paths are given in. ``groups`` maps a source to its file (:data:`GROUPS`; default
    the first). Catalogs of reserved projects (:func:`is_reserved`, on the source name and the
    path) are dropped before anything is read.
    """
    groups = groups or {}
    items: list[tuple[str, Path]] = []
    reserved: list[str] = []
    for c in catalogs:
        src, p = c if isinstance(c, tuple) else ("local", c)
        if is_reserved(src) or is_reserved(p):
            reserved.append(f"{src}: {p}")
            continue
        items.append((src, Path(p)))
    source_order = list(dict.fromkeys(src for src, _ in items))
    rank = {src: i for i, src in enumerate(source_order)}
    items.sort(key=lambda sp: (rank[sp[0]], str(sp[1])))

    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    first_source: dict[Pair, str] = {}  # items are in source order: the first seen is the first source
    pair_groups: dict[Pair, int] = {}  # the smallest GROUPS index of a source containing the pair
    seen_en: dict[str, set[str]] = collections.defaultdict(set)
    stats = {src: SourceStats() for src in source_order}
    for src, path in tqdm(items, desc="catalogs", unit="file", disable=not progress):
        entries, compiled, tilde = read_catalog(path)
        st = stats[src]
        gi = GROUPS.index(groups.get(src, GROUPS[0]))
        for entry in entries:
            st.entries += 1
            why = entry_rejection(entry, compiled)
            if why is None:
                cleaned = clean_pair(entry.msgid, entry.msgstr, tilde=tilde)
                if isinstance(cleaned, str):
                    why = cleaned
            if why is not None:
                st.rejected[why] += 1
                continue
            st.clean += 1
            counts[cleaned[0]][cleaned[1]] += 1
            first_source.setdefault(cleaned, src)
            if pair_groups.get(cleaned, len(GROUPS)) > gi:
                pair_groups[cleaned] = gi
            seen_en[src].add(cleaned[0])

    chosen = choose_translations(counts)
    rows = sorted(chosen.items())
    for src in source_order:
        stats[src].unique_en = len(seen_en[src])
    for pair in rows:
        stats[first_source[pair]].final += 1
    row_groups = {pair: GROUPS[pair_groups[pair]] for pair in rows}
    return BuildResult(rows, stats, row_groups, reserved)


def heldout_rows(result: BuildResult, training_english: set[str], cap: int = HELDOUT_CAP) -> list[Pair]:
    """The held-out pairs whose English is in no training file: at most ``cap``, the ones with the
    smallest sha256 of the English (a deterministic sample, not the alphabetical head), sorted."""
    unseen = [r for r in result.rows if r[0] not in training_english]
    unseen.sort(key=lambda r: hashlib.sha256(r[0].encode("utf-8")).hexdigest())
    return sorted(unseen[:cap])


@dataclass
class Corpus:
    train: BuildResult  # every training source: its rows are split over GROUPS
    heldout: BuildResult  # the HELDOUT_PROJECTS sources on their own
    files: dict[str, list[Pair]]  # "permissive", "copyleft", "heldout" -> rows


def build_corpus(
    catalogs: Iterable[tuple[str, Path | str]],
    groups: dict[str, str] | None = None,
    heldout: Iterable[str] = (),
    cap: int = HELDOUT_CAP,
    progress: bool = False,
) -> Corpus:
    """Training files and the held-out set from (source, catalog) pairs: sources named in
    ``heldout`` feed only the held-out set; the rest are deduplicated together (one translation per
    English string over all of them) and split by ``groups``."""
    held = set(heldout)
    catalogs = list(catalogs)
    train = build_rows([c for c in catalogs if c[0] not in held], progress=progress, groups=groups)
    test = build_rows([c for c in catalogs if c[0] in held], progress=progress)
    files = {g: train.rows_in(g) for g in GROUPS}
    files["heldout"] = heldout_rows(test, {en for en, _ in train.rows}, cap)
    return Corpus(train, test, files)


def tsv_bytes(rows: Sequence[Pair]) -> bytes:
    return "".join(f"{en}\t{ja}\n" for en, ja in rows).encode("utf-8")


def write_tsv(rows: Sequence[Pair], out: Path) -> str:
    """Write the rows; returns the file's sha256."""
    data = tsv_bytes(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    return hashlib.sha256(data).hexdigest()


def catalogs_to_tsv(catalogs: Iterable[Path | str | tuple[str, Path | str]], out: Path) -> BuildResult:
    """build_rows + write_tsv: what the tests run on a fixture, and the real build runs on the cache."""
    result = build_rows(catalogs)
    write_tsv(result.rows, Path(out))
    return result
