"""The language pairs the LibreTranslate API serves, and which model a request's ``source`` / ``target`` goes to.

Every served model that offers languages (``server/models/languages.py``, at its latest loaded version) serves its
pairs: a model made for one pair (``source_language`` / ``target_language`` in its bundle) that pair, a
multilingual one (M2M100, NLLB: ``languages`` in its bundle) each of its languages to each other. Several models and
languages on one server are listed as LibreTranslate lists them: each language with the codes it translates to.
A pair that several models serve goes to a model made for that pair before a multilingual one, and to the first by
name among equals (deterministic). The request's codes then go to the model API with the texts, which checks them
once and applies them (a forced target-language token for M2M100 and NLLB).
"""

from __future__ import annotations

from typing import Any

from server.errors import InvalidInput, clip
from server.models.languages import Offered

AUTO = "auto"

# English names of common ISO 639-1 codes (LibreTranslate lists a name with every code); others show the code.
LANGUAGE_NAMES = {
    "ar": "Arabic",
    "az": "Azerbaijani",
    "bg": "Bulgarian",
    "bn": "Bengali",
    "ca": "Catalan",
    "cs": "Czech",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "eo": "Esperanto",
    "es": "Spanish",
    "et": "Estonian",
    "fa": "Persian",
    "fi": "Finnish",
    "fr": "French",
    "ga": "Irish",
    "he": "Hebrew",
    "hi": "Hindi",
    "hu": "Hungarian",
    "id": "Indonesian",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "lt": "Lithuanian",
    "lv": "Latvian",
    "ms": "Malay",
    "nb": "Norwegian Bokmål",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sk": "Slovak",
    "sl": "Slovenian",
    "sq": "Albanian",
    "sv": "Swedish",
    "th": "Thai",
    "tl": "Tagalog",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "ur": "Urdu",
    "vi": "Vietnamese",
    "zh": "Chinese",
    "zh-Hans": "Chinese (Simplified)",
    "zh-Hant": "Chinese (Traditional)",
}


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


Served = list[tuple[str, Offered]]  # (model name, its languages), in routing order


def served(repo) -> Served:
    """The served models that offer languages, in routing order: those made for one pair, then multilingual ones,
    each kind by name."""
    found = [(name, repo.get(name).offered) for name in sorted(repo.models)]
    return sorted(((n, o) for n, o in found if o is not None), key=lambda x: x[1].multilingual is not None)


def serves(o: Offered, source: str, target: str) -> bool:
    return (
        o.knows(source, "source")
        and o.knows(target, "target")
        and (source != target or o.multilingual is None)
    )


def unloaded_model(repo, source: str, target: str) -> str:
    """The unloaded model that served source -> target when it was loaded ("" if none)."""
    for name in sorted(repo.unloaded):
        o = repo.languages.get(name)
        if (
            o
            and name not in repo.models
            and (serves(o, source, target) or (source == AUTO and o.knows(target, "target")))
        ):
            return name
    return ""


def _describe(models: Served) -> str:
    out = []
    for name, o in models:
        if o.multilingual is None:
            out.append(f"{o.sources[0]} -> {o.targets[0]} ({name})")
        else:
            out.append(f"{len(o.targets)} languages each to each other ({name}: {', '.join(o.targets)})")
    return "; ".join(out) or "none (no served model declares its languages)"


def languages(models: Served) -> list[dict[str, Any]]:
    """LibreTranslate's ``/languages``: every code of every served pair, each with the codes it translates to."""
    targets: dict[str, set[str]] = {}
    for _, o in models:
        for t in o.targets:
            targets.setdefault(t, set())
        for s in o.sources:
            targets.setdefault(s, set()).update(t for t in o.targets if t != s or o.multilingual is None)
    return [{"code": c, "name": language_name(c), "targets": sorted(targets[c])} for c in sorted(targets)]


def resolve(models: Served, source: str, target: str) -> tuple[str, str]:
    """(model name, source language) for a request's source (a code or "auto") and target; InvalidInput naming
    what is served otherwise."""
    if source == AUTO:
        choices = sorted(
            {s for _, o in models if o.knows(target, "target") for s in o.sources if serves(o, s, target)}
        )
        if len(choices) == 1:
            return resolve(models, choices[0], target)[0], choices[0]
        if not choices:
            raise InvalidInput(
                f"source=auto: no served model translates to {clip(target)}; served: {_describe(models)}"
            )
        raise InvalidInput(
            f"source=auto: this server has no language detector and several source languages translate "
            f"to {clip(target)} ({', '.join(choices)}); send one of them as source"
        )
    for name, o in models:
        if serves(o, source, target):
            return name, source
    raise InvalidInput(f"{clip(source)} -> {clip(target)} is not served; served: {_describe(models)}")
