"""The model bundle: the contract between `s2s export` and the server.

A model repository is laid out like Triton's, one folder per model and version:

    models/<name>/<version>/config.json      this file's schema (BundleConfig)
                            tokenizer.json   Hugging Face tokenizer (of the source, and of the target unless:)
                            target_tokenizer.json  the target's, where the sides differ (imported models)
                            encoder.onnx     src_ids, src_mask -> memory, cross K/V per layer
                            decoder.onnx     one decoding step with KV cache

``config.json`` describes everything a reader needs: dimensions, special ids, the task's
preprocessing, tensor names with dynamic axes, the opset, and the sha256 of every other file,
so a truncated or swapped file is caught at load time with the file named. A translation bundle
may also say its languages (``source_language`` / ``target_language``, ISO 639-1 codes such as "en"
and "ja"; ``s2s export --source-lang/--target-lang``): the LibreTranslate API routes a language pair
to the bundle that declares it. Both are optional; a bundle without them (an older one, or a task
such as addition that has no languages) loads as before and is not offered by that API.

A bundle made by ``s2s import`` from another trainer's checkpoint also records its ``origin`` (the
family, the transformers version, the sha256 of the weights it was made from). A multilingual model's bundle
says its ``languages`` (``contract/languages.py``): each language's token, how it is asked for (a forced first
token, a source prefix), and ISO 639-1 codes mapped to the model's own; such a bundle is format 6. A bundle whose
sources start with a token of their own or whose outputs with a forced one (BART's ``<s>``) is format 7, and
``start`` gives any reader a request's source ids and forced tokens, whatever the family. A bundle of T5's family
(T5, mT5, Flan-T5, MADLAD-400: ``s2s import``) records the knobs that model moves in ``model`` (relative position
buckets, RMSNorm, a gated feed-forward, ...) and is format 8.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.config import ModelConfig, TaskConfig, read_json, write_json
from contract.languages import Languages
from contract.names import GraphIO, cross_key, decoder_io, encoder_io

FORMAT_VERSION = 2
# A bundle whose graphs use ONNX Runtime's contrib operators (com.microsoft, e.g. the fused
# MultiHeadAttention of `s2s export --fused-attention`) is format 3: a reader must run ONNX Runtime.
FORMAT_CONTRIB_OPS = 3
# A bundle whose task names its default length penalty rule (task.length_penalty_type other than "gnmt") is format
# 4, whatever operators its graphs use: a reader of formats 1-3 would not know the field.
FORMAT_PENALTY_RULE = 4
# A bundle that a reader of formats 1-4 would misread is format 5: its model moves an architecture knob (the graphs
# hold them, but not the ids and tokenizers around them), it has a target tokenizer of its own, or its task names
# decoding defaults those readers do not know (suppressed tokens, its alpha, an n-gram ban, transformers' rule).
FORMAT_IMPORTED = 5
# A bundle with languages is format 6: a reader of 1-5 would decode it without the language tokens it needs.
FORMAT_LANGUAGES = 6
# A bundle whose sources start with a token of their own or whose outputs with a forced one (task.source_start_id,
# task.forced_bos_id: BART's <s>), or whose model has a LayerNorm on its embeddings, is format 7: readers of 1-6 know
# neither field.
FORMAT_START_TOKENS = 7
# A bundle whose model moves a knob readers of 1-7 do not know (T5's relative position bias, RMSNorm, gated
# feed-forward, unscaled attention, projections without bias, rescaled output, heads of d_kv) is format 8.
FORMAT_T5_KNOBS = 8
# A bundle whose task records generate()'s rules on where an output ends (task.forced_eos_id, min_length,
# early_stopping) is format 9: readers of 1-8 would end those outputs elsewhere.
FORMAT_END_RULES = 9
# Formats this code reads: 1 lacks task.beam_size (its bundles decode greedy by default); 1-3 decode with gnmt.
READABLE_FORMATS = (1, 2, 3, 4, 5, 6, 7, 8, 9)
CONFIG_FILE, TOKENIZER_FILE, ENCODER_FILE, DECODER_FILE = (
    "config.json",
    "tokenizer.json",
    "encoder.onnx",
    "decoder.onnx",
)
TARGET_TOKENIZER_FILE = "target_tokenizer.json"
PAYLOAD_FILES = (TOKENIZER_FILE, ENCODER_FILE, DECODER_FILE)
OPTIONAL_FILES = (TARGET_TOKENIZER_FILE,)  # checked like the others where config.json lists them


class BundleError(Exception):
    """A bundle that cannot be served; the message names the file and what is wrong with it."""


# An ISO 639-1 code ("en"), or the BCP 47 tags LibreTranslate also uses for some languages ("zh-Hant", "pt-BR").
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})*")


def check_language(code: str | None, what: str = "language") -> str | None:
    """``code`` if it is None or a language code (ISO 639-1, e.g. "en"); ValueError naming ``what`` otherwise."""
    if code is not None and (not isinstance(code, str) or not _LANGUAGE_CODE.fullmatch(code)):
        raise ValueError(f"{what} must be an ISO 639-1 language code such as 'en' or 'ja', not {code!r}")
    return code


@dataclass(frozen=True)
class BundleConfig:
    name: str
    version: int
    model: ModelConfig
    task: TaskConfig
    opset: int
    files: dict[str, str]  # file name -> sha256
    source_checkpoint_sha256: str
    quantization: str = (
        "none"  # none | int8-dynamic | int8-nbits | fp16 (export/quantize.py); "int8" in bundles before them
    )
    validation: dict[str, Any] = field(default_factory=dict)  # what the export checked, with figures
    format_version: int = FORMAT_VERSION
    source_language: str | None = None  # ISO 639-1 code of what the model reads (translation); None: not said
    target_language: str | None = None  # ISO 639-1 code of what it writes
    origin: dict[str, Any] | None = None  # s2s import: model_type, transformers_version, weights_sha256, ...
    languages: Languages | None = (
        None  # a multilingual model's languages; None: one pair (or none) per bundle
    )
    # The decoder takes cross K/V once per input, not per beam row (its config's decoder I/O names that axis
    # "sources"). Older readers feed them per row, which such a graph reads right too (N = B): no format change.
    cross_per_source: bool = False

    def __post_init__(self) -> None:
        check_language(self.source_language, "source_language")
        check_language(self.target_language, "target_language")

    @property
    def encoder_io(self) -> GraphIO:
        return encoder_io(self.model.n_decoder_layers)

    @property
    def decoder_io(self) -> GraphIO:
        return decoder_io(self.model.n_decoder_layers, self.cross_per_source)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "format_version": self.format_version,
            "name": self.name,
            "version": self.version,
            "model": self.model.to_dict(),
            "task": self.task.to_dict(),
            "opset": self.opset,
            "special_ids": self.model.special.__dict__,  # repeated at top level for readers that look only here
            "encoder": self.encoder_io.to_dict(),
            "decoder": self.decoder_io.to_dict(),
            "files": self.files,
            "source_checkpoint_sha256": self.source_checkpoint_sha256,
            "quantization": self.quantization,
            "validation": self.validation,
        }
        # Written only when said: a bundle without languages keeps the config it always had.
        if self.source_language is not None:
            d["source_language"] = self.source_language
        if self.target_language is not None:
            d["target_language"] = self.target_language
        if self.origin is not None:
            d["origin"] = self.origin
        if self.languages is not None:
            d["languages"] = self.languages.to_dict()
        return d

    def start(
        self, src_ids: list[int], source: str | None = None, target: str | None = None
    ) -> tuple[list[int], list[int]]:
        """A request's source ids as the model reads them, and the tokens forced first on its output, which are not
        part of the answer: a multilingual model's language tokens (``Languages.apply``; None: this bundle's
        source_language / target_language), else the task's forced_bos_id (BART's <s>), else none."""
        if self.languages is not None:
            return self.languages.apply(
                src_ids, source or self.source_language, target or self.target_language
            )
        return src_ids, [] if self.task.forced_bos_id is None else [self.task.forced_bos_id]

    def write(self, folder: Path) -> None:
        write_json(Path(folder) / CONFIG_FILE, self.to_dict())


def format_for(
    model: ModelConfig, task: TaskConfig, fused: bool, target_tokenizer: bool, languages: bool = False
) -> int:
    """The oldest format whose readers read such a bundle right (see the FORMAT_ constants)."""
    if task.forced_eos_id is not None or task.min_length or task.early_stopping:
        return FORMAT_END_RULES
    if model.moves_later_knobs:
        return FORMAT_T5_KNOBS
    if model.embedding_norm or task.source_start_id is not None or task.forced_bos_id is not None:
        return FORMAT_START_TOKENS
    if languages:
        return FORMAT_LANGUAGES
    if (
        not model.is_paper
        or target_tokenizer
        or task.suppressed_ids
        or task.length_penalty is not None
        or task.no_repeat_ngram_size
        or task.length_penalty_type not in ("gnmt", "ctranslate2")
    ):
        return FORMAT_IMPORTED
    if task.length_penalty_type != "gnmt":
        return FORMAT_PENALTY_RULE
    return FORMAT_CONTRIB_OPS if fused else FORMAT_VERSION


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# What says a file is still the one that was hashed: its size, modification time (ns) and inode.
Stamp = tuple[int, int, int]


def stamp(path: Path) -> Stamp:
    st = Path(path).stat()
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _hashed_ok(path: Path, want: str, hashed: Mapping[str, Stamp], stamps: dict[str, Stamp]) -> str | None:
    """None when ``path``'s sha256 is ``want`` (or its stamp is the one ``hashed`` recorded: not read again), else
    the sha256 it has. A file unchanged while it was read gets its stamp in ``stamps``."""
    before = stamp(path)
    if hashed.get(path.name) == before:
        stamps[path.name] = before
        return None
    if (got := sha256_file(path)) != want:
        return got
    if stamp(path) == before:
        stamps[path.name] = before
    return None


def verified(
    folder: Path, hashed: Mapping[str, Stamp] | None = None
) -> tuple[BundleConfig, dict[str, Stamp]]:
    """``read_bundle`` with every hash checked, and the stamps of the files that passed: a process that loads the
    bundle later (an engine core) given them as ``hashed`` reads again only a file changed since."""
    stamps: dict[str, Stamp] = {}
    return read_bundle(folder, True, hashed, stamps), stamps


def incomplete(folder: Path) -> str:
    """Why the version folder ``folder`` is not a whole bundle ("" when it is): its config.json unreadable, a file
    it lists missing, or one whose sha256 is not the one it records (an export killed while copying, a copy cut
    short). The definition the server's start uses to pass over such a version to the newest whole one."""
    try:
        read_bundle(folder, verify_hashes=True)
    except BundleError as e:
        return str(e)
    except OSError as e:  # unreadable: permissions, a file vanishing while read
        return f"{folder}: {type(e).__name__}: {e}"
    return ""


def read_bundle(
    folder: Path,
    verify_hashes: bool = True,
    hashed: Mapping[str, Stamp] | None = None,
    stamps: dict[str, Stamp] | None = None,
) -> BundleConfig:
    """Parse and check config.json and the files it lists. Raises BundleError naming the file. ``hashed``: files
    already checked, by name, with their stamp then: one whose stamp is still that is not hashed again (a bundle
    of GBs takes seconds a pass). ``stamps`` (filled in): the stamps of the files found right."""
    folder = Path(folder)
    hashed = hashed or {}
    stamps = {} if stamps is None else stamps
    cfg_path = folder / CONFIG_FILE
    if not cfg_path.is_file():
        raise BundleError(
            f"{cfg_path}: missing; a bundle folder needs {CONFIG_FILE} (written by `s2s export`)"
        )
    try:
        d = read_json(cfg_path)
        if d.get("format_version") not in READABLE_FORMATS:
            raise BundleError(
                f"{cfg_path}: format_version {d.get('format_version')!r}; this version of s2s reads "
                f"{', '.join(map(str, READABLE_FORMATS))}: upgrade s2s, or re-export the bundle with it"
            )
        cfg = BundleConfig(
            name=d["name"],
            version=int(d["version"]),
            model=ModelConfig.from_dict(d["model"]),
            task=TaskConfig.from_dict(d["task"]),
            opset=int(d["opset"]),
            files=dict(d["files"]),
            source_checkpoint_sha256=d["source_checkpoint_sha256"],
            quantization=d.get("quantization", "none"),
            validation=d.get("validation", {}),
            format_version=int(d["format_version"]),
            source_language=d.get("source_language"),
            target_language=d.get("target_language"),
            origin=d.get("origin"),
            languages=Languages.from_dict(d["languages"]) if d.get("languages") else None,
            cross_per_source=_axis(d, "decoder", cross_key(0), 0) == "sources",
        )
    except BundleError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise BundleError(f"{cfg_path}: not a valid bundle config ({type(e).__name__}: {e})") from e
    for name in PAYLOAD_FILES + tuple(f for f in OPTIONAL_FILES if f in cfg.files):
        path = folder / name
        if not path.is_file():
            raise BundleError(f"{path}: missing (listed in {CONFIG_FILE})")
        if name not in cfg.files:
            raise BundleError(f"{cfg_path}: no sha256 recorded for {name}")
        if verify_hashes and (got := _hashed_ok(path, cfg.files[name], hashed, stamps)):
            raise BundleError(
                f"{path}: sha256 {got[:12]}… does not match {cfg.files[name][:12]}… in {CONFIG_FILE} "
                "(truncated, corrupted or replaced after export)"
            )
    if verify_hashes:
        _check_external_data(folder, cfg, hashed, stamps)
    return cfg


def _axis(d: dict, graph: str, tensor: str, axis: int) -> str | None:
    """The name config.json gives one axis of a graph's tensor (None: not said, as in hand-made configs)."""
    try:
        return d[graph]["inputs"][tensor][str(axis)]
    except (KeyError, TypeError):
        return None


def _check_external_data(
    folder: Path, cfg: BundleConfig, hashed: Mapping[str, Stamp], stamps: dict[str, Stamp]
) -> None:
    """Every external-data file a graph reads is a file of the bundle's folder with its sha256 in config.json."""
    from contract.graph_files import external_data_files

    for graph in (ENCODER_FILE, DECODER_FILE):
        try:
            locations = external_data_files(folder / graph)
        except (
            Exception
        ):  # not a graph at all (truncated, say): ONNX Runtime's refusal names the file as it loads
            continue
        for location in locations:
            where = f"{folder / graph}: external data {location[:80]!r}"
            if "/" in location or "\\" in location or location in (".", "..") or location in PAYLOAD_FILES:
                raise BundleError(f"{where} is not a file of its own in the bundle's folder")
            if location not in cfg.files:
                raise BundleError(
                    f"{where} has no sha256 in {CONFIG_FILE}: every file a graph reads must be listed"
                )
            path = folder / location
            if not path.is_file():
                raise BundleError(f"{path}: missing (external data of {graph})")
            if got := _hashed_ok(path, cfg.files[location], hashed, stamps):
                raise BundleError(
                    f"{path}: sha256 {got[:12]}… does not match {cfg.files[location][:12]}… in "
                    f"{CONFIG_FILE} (external data of {graph}: truncated, corrupted or replaced)"
                )
