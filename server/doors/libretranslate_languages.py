"""The languages the LibreTranslate API lists: each code with its English name and the codes it translates to.

The served pairs (``server/doors/libretranslate_pairs.py``: which models serve which pairs, and which model a pair
goes to) are listed as LibreTranslate lists them. The request's codes go to the model API with the texts, which
checks them once and applies them (a forced target-language token for M2M100 and NLLB).
"""

from __future__ import annotations

from typing import Any

from server.doors.libretranslate_pairs import Served

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


def languages(models: Served) -> list[dict[str, Any]]:
    """LibreTranslate's ``/languages``: every code of every served pair, each with the codes it translates to."""
    targets: dict[str, set[str]] = {}
    for o in (c.offered for c in models):
        for t in o.targets:
            targets.setdefault(t, set())
        for s in o.sources:
            targets.setdefault(s, set()).update(t for t in o.targets if t != s or o.multilingual is None)
    return [{"code": c, "name": language_name(c), "targets": sorted(targets[c])} for c in sorted(targets)]
