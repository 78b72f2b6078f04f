"""The languages a multilingual model knows, and how each is asked for: part of the bundle (``languages``).

A model names its languages in its own codes, each one token of its vocabulary: M2M100's ``__ja__``, NLLB's
``jpn_Jpan``, Marian's ``>>jpn<<``, MADLAD-400's ``<2ja>``. How a request asks for one (``target``):

* ``forced_bos``: the target language's token is forced as the first generated token (M2M100, NLLB, mBART-50,
  transformers' ``forced_bos_token_id``; CTranslate2's one-token target prefix). It is not part of the answer.
* ``source_prefix``: the token starts the source (Marian's multi-target models: ``>>fra<< X </s>``, as MarianTokenizer
  reads a text that starts with it; MADLAD-400's ``<2fr> X </s>``). A request that names no target is read as sent: its text may carry the token.

and whether the source language is said too (``source``: ``prefix``, its token first, as M2M100 and NLLB read
``__en__ X </s>``; ``none``: not said, the model reads the one its bundle declares; ``any``: not said, the model reads
any of its languages, MADLAD-400's). Requests name languages by conventional codes (ISO 639-1 as LibreTranslate uses:
"ja", "zh-Hant") or by the model's own; ``codes`` maps the first to the second, and the reverse is derived.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

TARGET_WAYS = ("forced_bos", "source_prefix")
SOURCE_WAYS = ("prefix", "none", "any")

# ISO 639-3 (NLLB's codes before the script) -> ISO 639-1, for the languages that have one; the script decides
# between zh (Simplified) and zh-Hant. A model code not here is offered under its own code only.
_ISO3 = dict(
    p.split(":")
    for p in (
        "afr:af amh:am arb:ar asm:as azj:az bak:ba bel:be ben:bn bod:bo bos:bs bul:bg cat:ca ces:cs cym:cy dan:da deu:de "
        "ell:el eng:en epo:eo est:et eus:eu ewe:ee fao:fo fin:fi fra:fr gla:gd gle:ga glg:gl grn:gn guj:gu hat:ht hau:ha "
        "heb:he hin:hi hrv:hr hun:hu hye:hy ibo:ig ind:id isl:is ita:it jav:jv jpn:ja kan:kn kas:ks kat:ka kaz:kk khk:mn "
        "khm:km kik:ki kin:rw kir:ky kmr:ku kon:kg kor:ko lao:lo lim:li lin:ln lit:lt ltz:lb lug:lg lvs:lv mal:ml mar:mr "
        "mkd:mk mlt:mt mri:mi mya:my nld:nl nno:nn nob:nb npi:ne nya:ny oci:oc ory:or pan:pa pbt:ps pes:fa pol:pl por:pt "
        "ron:ro rus:ru san:sa sin:si slk:sk slv:sl smo:sm sna:sn snd:sd som:so sot:st spa:es als:sq srd:sc srp:sr ssw:ss "
        "sun:su swe:sv swh:sw tam:ta tat:tt tel:te tgk:tg tgl:tl tha:th tir:ti tsn:tn tso:ts tuk:tk tur:tr twi:tw uig:ug "
        "ukr:uk urd:ur uzn:uz vie:vi wol:wo xho:xh ydd:yi yor:yo zsm:ms zul:zu gaz:om aka:ak bam:bm fij:fj kab:kab "
        "ltg:ltg"
    ).split()
)
_MODEL_CODE = (
    (re.compile(r"__([a-z]{2,3})__"), lambda m: m.group(1)),  # M2M100
    (re.compile(r">>([a-z]{2,3})<<"), lambda m: m.group(1)),  # Marian
    (re.compile(r"<2([a-z]{2,3})>"), lambda m: m.group(1)),  # MADLAD-400
    (
        re.compile(r"([a-z]{3})_([A-Z][a-z]{3})"),  # NLLB, FLORES-200: language_Script
        lambda m: {"zho_Hans": "zh", "zho_Hant": "zh-Hant"}.get(m.group(0), _ISO3.get(m.group(1))),
    ),
    (re.compile(r"([a-z]{2})_[A-Z]{2}"), lambda m: m.group(1)),  # mBART: ja_XX
)


class LanguageError(ValueError):
    """A language a model does not know; the message lists the ones it does."""


def conventional(model_code: str) -> str | None:
    """The ISO 639-1 code of a model's own language code ("jpn_Jpan" -> "ja"), None where there is none."""
    for pattern, to in _MODEL_CODE:
        if m := pattern.fullmatch(model_code):
            return to(m)
    return None


@dataclass(frozen=True)
class Languages:
    tokens: dict[str, int]  # the model's own code -> the id of its token ("jpn_Jpan": 256079)
    # conventional code -> the model's own ("ja": "jpn_Jpan")
    codes: dict[str, str] = field(default_factory=dict)
    target: str = "forced_bos"
    source: str = "prefix"

    def __post_init__(self) -> None:
        if self.target not in TARGET_WAYS or self.source not in SOURCE_WAYS:
            raise ValueError(
                f"languages: target {self.target!r} / source {self.source!r}; "
                f"known: {', '.join(TARGET_WAYS)} / {', '.join(SOURCE_WAYS)}"
            )
        if bad := [c for c, m in self.codes.items() if m not in self.tokens]:
            raise ValueError(f"languages.codes: {bad[:5]} map to codes that languages.tokens lacks")

    @classmethod
    def of_tokens(
        cls, tokens: dict[str, int], target: str = "forced_bos", source: str = "prefix"
    ) -> Languages:
        """From the model's language tokens, each offered under its conventional code as well (the first model
        code of a conventional one wins: NLLB's arb_Arab over a dialect's code that maps nowhere anyway)."""
        codes: dict[str, str] = {}
        for own in sorted(tokens, key=tokens.get):
            if (c := conventional(own)) is not None and c not in tokens:
                codes.setdefault(c, own)
        return cls(dict(tokens), codes, target, source)

    def own(self, code: str, what: str = "language") -> str:
        """A conventional or own code -> the model's own; LanguageError naming the codes it knows."""
        if code in self.tokens:
            return code
        if code in self.codes:
            return self.codes[code]
        known = sorted(self.codes) + sorted(c for c in self.tokens if c not in self.codes.values())
        raise LanguageError(f"{what} {code!r} is not one this model knows; it knows {', '.join(known)}")

    def token(self, code: str, what: str = "language") -> int:
        return self.tokens[self.own(code, what)]

    @property
    def names(self) -> dict[str, str]:
        """Every code a request may use -> how the model's own code reads conventionally (itself where none)."""
        back = {m: c for c, m in self.codes.items()}
        return {back.get(m, m): m for m in self.tokens}

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "source": self.source,
            "tokens": dict(self.tokens),
            "codes": dict(self.codes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Languages:
        return cls(
            {str(k): int(v) for k, v in d["tokens"].items()},
            {str(k): str(v) for k, v in d.get("codes", {}).items()},
            d.get("target", "forced_bos"),
            d.get("source", "prefix"),
        )

    def apply(
        self, src_ids: list[int], source: str | None, target: str | None
    ) -> tuple[list[int], list[int]]:
        """A request's languages on its source ids: (the source ids the model reads, the tokens forced first on the
        target, not part of the answer). LanguageError for a language the model does not know, or one not given."""
        if self.source == "prefix":
            if not source:
                raise LanguageError(
                    f"a source language is needed; this model knows {', '.join(sorted(self.names))}"
                )
            src_ids = [self.token(source, "source language")] + src_ids
        if (
            not target and self.target == "source_prefix"
        ):  # Marian's: the text may start with the token itself
            return src_ids, []
        if not target:
            raise LanguageError(
                f"a target language is needed; this model knows {', '.join(sorted(self.names))}"
            )
        tok = self.token(target, "target language")
        return ([tok] + src_ids, []) if self.target == "source_prefix" else (src_ids, [tok])
