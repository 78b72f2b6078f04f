"""``s2s translate FILE --model NAME --out OUT``: a translation catalog's strings translated by a running server.

The catalog is read and written by translate-toolkit (``s2s/catalog_store.py``): gettext .po, XLIFF, Qt .ts, Java
.properties, JSON and i18next. Every string goes to the server as ``s2s client`` sends it (placeholders, markup,
URLs and numbers protected by the server), and each output is checked with the same rules
(``contract.spans.check``). An entry the server refuses, or whose output lost a span, is reported with its line
(or key) and left as it was; the others are written, marked fuzzy (needs review) where the format can say so.
Existing translations are kept unless ``--overwrite``. The result goes to ``--out`` only, or over FILE with
``--in-place``; nothing is written when the run stops (a server that cannot be reached, an option it refuses).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

HELP = "translate a catalog (.po, XLIFF, Qt .ts, .properties, JSON, i18next) through a running server"
DESCRIPTION = (
    "Sends the untranslated strings of FILE to a running server's model (as s2s client does) and writes the "
    "catalog with their translations, marked fuzzy (needs review) where the format can say so, to --out (or "
    "into FILE with --in-place). Plural entries get every form the target language has. An entry the server "
    "refuses, or whose output lost a placeholder, tag, URL or number, is reported with its line (or key) and "
    "left untranslated; the rest of the file goes on. Exit status 1 when an entry was left untranslated (the "
    "file is still written) or the server could not be used (nothing written); 2 for a catalog it cannot read "
    "or a command line it refuses."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from s2s.catalog_store import FORMATS  # translate-toolkit-free: names only

    p.add_argument("file", help="the catalog to translate")
    p.add_argument("--model", required=True, help="model name (s2s client --list shows them)")
    p.add_argument("--out", help="where to write the translated catalog (FILE itself only with --in-place)")
    p.add_argument(
        "--in-place", action="store_true", help="write the translations into FILE (bilingual formats)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="translate every entry again; by default an entry that has a translation keeps it (for a "
        "monolingual format: the translation in an existing --out file, matched by key)",
    )
    p.add_argument(
        "--format",
        choices=tuple(FORMATS),
        default=None,
        help="the catalog's format (default: from the extension): "
        + "; ".join(f"{k}: {f.describe}" for k, f in FORMATS.items()),
    )
    p.add_argument("--server", default="localhost:8001", help="HOST:PORT of the gRPC port")
    p.add_argument("--beam-size", type=int, default=0, help="0 = the model's default; 1 = greedy")
    p.add_argument(
        "--source-lang", default="", metavar="CODE", help="for a multilingual model, as s2s client's"
    )
    p.add_argument(
        "--target-lang",
        default="",
        metavar="CODE",
        help="for a multilingual model, as s2s client's; also the language whose plural forms a monolingual "
        "catalog gets (a bilingual one names its own)",
    )
    p.add_argument("--concurrency", type=int, default=4, metavar="K", help="requests in flight at once")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline of each request in seconds")
    p.add_argument("--token", default=None, help="bearer token, if the server requires one")
    p.add_argument("--tls-ca", default=None, help="PEM CA to verify a TLS server")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


@dataclass
class Job:
    """One entry to translate: the source of each form of its translation, and the forms it already has."""

    unit: object
    where: str
    forms: list[str]
    have: list[str] = field(default_factory=list)


def _destination(args, path: Path, monolingual: bool) -> Path | str:
    """Where the result goes, or the message that refuses the command line."""
    if args.in_place and args.out:
        return "--out and --in-place: name one"
    if args.in_place:
        if monolingual:
            return (
                f"{path} is monolingual (its values are the source strings): write the translation with --out"
            )
        return path
    if not args.out:
        return "name where the translation goes: --out FILE (or --in-place for a bilingual catalog)"
    out = Path(args.out)
    if out.exists() and path.exists() and out.resolve() == path.resolve():
        return f"--out is {path} itself: add --in-place to write into it"
    if out.is_dir():
        return f"--out {out} is a folder: name the file"
    if not out.parent.is_dir():
        return f"--out {out}: no folder {out.parent}"
    return out


def _existing(args, out: Path, fmt: str, monolingual: bool) -> dict[str, list[str]]:
    """A monolingual catalog's translations already in --out, by key (read with the same format: its values are
    what translate-toolkit calls a monolingual unit's source)."""
    from s2s.catalog_store import read, sources, translatable

    if not monolingual or args.overwrite or not out.exists():
        return {}
    return {str(u.getid()): sources(u) for u in read(out, fmt).units if translatable(u)}


def _jobs(
    store, path: Path, keep: dict[str, list[str]], bilingual: bool, overwrite: bool
) -> tuple[list[Job], int]:
    """(the entries to translate, how many kept their translation). A monolingual entry kept gets its
    translation from ``keep`` here: the store becomes the output."""
    from s2s.catalog_store import form_sources, set_target, targets, translatable, where

    jobs, kept = [], 0
    for unit in store.units:
        if not translatable(unit):
            continue
        forms = form_sources(store, unit)
        have = [] if overwrite else targets(unit) if bilingual else keep.get(str(unit.getid()), [])
        have = (have + [""] * len(forms))[: len(forms)]
        if all(have):
            kept += 1
            if not bilingual:
                set_target(unit, have)
            continue
        jobs.append(Job(unit, where(path, unit), forms, have))
    return jobs, kept


def _translate(args, texts: list[str]):
    from tqdm import tqdm

    from s2s.catalog_client import translate_each
    from s2s.seq2seq_client import Seq2SeqClient

    kw = dict(beam_size=args.beam_size, source_language=args.source_lang, target_language=args.target_lang)
    bar = tqdm(
        total=len(texts), unit="string", desc="translating", disable=args.no_progress or None, file=sys.stderr
    )
    with (
        bar,
        Seq2SeqClient(args.server, token=args.token, tls_ca=args.tls_ca, timeout=args.timeout) as client,
    ):
        answers = translate_each(client, args.model, texts, bar.update, concurrency=args.concurrency, **kw)
    return dict(zip(texts, answers))


def _new_forms(job: Job, answers: dict) -> list[str] | str:
    """The job's forms with the answers filled in, or why the entry stays as it was."""
    from contract.spans import check
    from s2s.check_po import describe

    new = list(job.have)
    for i, (src, had) in enumerate(zip(job.forms, job.have)):
        if had:
            continue
        a = answers[src]
        if a.text is None:
            return f"refused by the server: {a.refused}"
        if not (c := check(src, a.text)).ok:
            return f"the output lost spans ({describe(c)}): {a.text}"
        new[i] = a.text
    return new


def _apply(jobs: list[Job], answers: dict, remove=None) -> tuple[int, list[str]]:
    """Set each job's target from the answers, marked fuzzy: (entries written, a report per entry left as it
    was). ``remove``: a monolingual store's removeunit, for the entries left untranslated, since the output of a
    monolingual catalog holds translations only (a missing key falls back to the source language at run time,
    where a copied source would pass for a translation)."""
    from s2s.catalog_store import set_target

    done, problems = 0, []
    for job in jobs:
        new = _new_forms(job, answers)
        if isinstance(new, str):
            problems.append(f"{job.where}: not translated, {new}\n  source: {_short(job.forms[-1])}")
            if remove is not None:
                remove(job.unit)
            continue
        set_target(job.unit, new)
        job.unit.markfuzzy(True)
        done += 1
    return done, problems


def _short(text: str, limit: int = 120) -> str:
    if not text.strip():
        return repr(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def run_cli(args) -> int:
    try:
        import tqdm  # noqa: F401
        import translate.storage  # noqa: F401
    except ImportError:
        print(
            's2s translate: needs translate-toolkit and tqdm (pip install -e ".[catalogs]")', file=sys.stderr
        )
        return 2
    from s2s.catalog_client import RequestRefused
    from s2s.catalog_store import FORMATS, CatalogError, format_of, read, write

    if args.concurrency < 1 or args.beam_size < 0:
        print("s2s translate: --concurrency must be >= 1 and --beam-size >= 0", file=sys.stderr)
        return 2
    path = Path(args.file)
    try:
        fmt = format_of(path, args.format)
        monolingual = FORMATS[fmt].monolingual
        out = _destination(args, path, monolingual)
        if isinstance(out, str):
            print(f"s2s translate: {out}", file=sys.stderr)
            return 2
        store = read(path, fmt)
        keep = _existing(args, out, fmt, monolingual)
    except CatalogError as e:
        print(f"s2s translate: {e}", file=sys.stderr)
        return 2
    if monolingual and args.target_lang:
        store.settargetlanguage(args.target_lang)  # its plural forms (i18next's key_one, key_other, ...)
    jobs, kept = _jobs(store, path, keep, not monolingual, args.overwrite)
    texts = list(dict.fromkeys(src for j in jobs for src, had in zip(j.forms, j.have) if not had))
    try:
        answers = _translate(args, texts) if texts else {}
    except RequestRefused as e:
        print(f"s2s translate: {e}; nothing written", file=sys.stderr)
        return 1
    except OSError as e:  # the --tls-ca file
        print(f"s2s translate: --tls-ca {args.tls_ca}: {e.strerror or e}; nothing written", file=sys.stderr)
        return 2
    done, problems = _apply(jobs, answers, remove=store.removeunit if monolingual else None)
    for line in problems:
        print(line)
    try:
        write(store, out)
    except OSError as e:
        print(f"s2s translate: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(
        f"{done} of {len(jobs)} entries translated ({len(problems)} left as they were), {kept} kept their "
        f"translation; written to {out}",
        file=sys.stderr,
    )
    return 1 if problems else 0
