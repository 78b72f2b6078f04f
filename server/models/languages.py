"""A served model's languages as requests name them, and a request's languages checked once (the model API's).

What a model offers comes from its bundle: a multilingual one (``languages``, format 6, ``contract/languages.py``)
translates each of its languages to each other; one that declares a pair (``source_language`` /
``target_language``) translates that pair; any other offers none. A request names its source and target language,
each optional, by a conventional code (ISO 639-1 as LibreTranslate uses, "ja") or by the model's own ("__ja__",
"jpn_Jpan"); one it leaves out is the bundle's default, where the bundle declares one. Every door hands both to
``ServedVersion.prepare``, which checks them here, before any text is tokenized, and applies what they mean to
the model: a source token first, the target's token forced first on the output (and never part of the answer).
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.bundle import BundleConfig, check_language
from contract.languages import LanguageError, Languages
from server.errors import InvalidInput, clip


@dataclass(frozen=True)
class Offered:
    """The language pairs one model translates, in the codes its requests and listings use."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    multilingual: Languages | None = None  # each source to each other target; None: the one pair

    @classmethod
    def of(cls, b: BundleConfig) -> Offered | None:
        langs = b.languages
        if langs is None:
            if b.source_language and b.target_language:
                return cls((b.source_language,), (b.target_language,))
            return None
        codes = tuple(sorted(langs.names))
        if langs.source in ("prefix", "any"):  # each of its languages, said by a token or not at all
            sources = codes
        else:  # the model reads its source without a token: the one its bundle says, if it says one
            sources = (b.source_language,) if b.source_language else ()
        return cls(sources, codes, langs)

    def knows(self, code: str, side: str) -> bool:
        """A code (conventional or the model's own) is one of its ``side`` ("source" / "target") languages."""
        listed = self.sources if side == "source" else self.targets
        if code in listed:
            return True
        m = self.multilingual
        return m is not None and code in m.tokens and (side == "target" or m.source != "none")


@dataclass(frozen=True)
class Asked:
    """A request's languages as the model reads them: tokens put before each source, tokens forced first on the
    target (counted among the new tokens, not part of the answer)."""

    source: str | None = None  # as the request named them, or the bundle's default
    target: str | None = None
    lead: int = 0  # tokens put before each source's ids
    forced: tuple[int, ...] = ()
    languages: Languages | None = None

    def source_ids(self, ids: list[int]) -> list[int]:
        if self.languages is None:
            return ids
        return self.languages.apply(ids, self.source, self.target)[0]


AS_SENT = Asked()


def ask(name: str, b: BundleConfig, source: str | None, target: str | None) -> Asked:
    """A request's languages (None or "": not named) checked against the model's; InvalidInput naming the ones it
    knows."""
    source, target = source or None, target or None
    langs = b.languages
    if langs is None:
        return _one_pair(name, b, source, target)
    if source and langs.source == "any":  # read without a token: any of its languages
        try:
            langs.own(source, "source language")
        except LanguageError as e:
            raise InvalidInput(f"model {name!r}: {e}") from None
        source = None
    if source and langs.source == "none":  # read without a token: only the one the bundle declares is checked
        if b.source_language and source != b.source_language:
            raise InvalidInput(
                f"model {name!r} reads {b.source_language}: source_language {clip(source)} is not one it knows"
            )
        source = None
    source = source or b.source_language
    target = target or b.target_language
    try:
        lead, forced = langs.apply([], source, target)
    except LanguageError as e:
        raise InvalidInput(f"model {name!r}: {e}") from None
    return Asked(source, target, len(lead), tuple(forced), langs)


def _one_pair(name: str, b: BundleConfig, source: str | None, target: str | None) -> Asked:
    # A model whose every output starts with a token of its task (BART's <s>: forced_bos_id) has it forced as a
    # language token is, and left out of the answer alike.
    plain = AS_SENT if b.task.forced_bos_id is None else Asked(forced=(b.task.forced_bos_id,))
    if not (source or target):
        return plain
    pair = (b.source_language, b.target_language)
    if not any(pair):
        raise InvalidInput(
            f"model {name!r} (task {b.task.name}) declares no languages: send no source_language or "
            "target_language"
        )
    for side, code, own in (("source", source, pair[0]), ("target", target, pair[1])):
        if code and own and code != own:
            raise InvalidInput(
                f"{side}_language {clip(code)} is not one model {name!r} knows; it translates "
                f"{pair[0] or '?'} -> {pair[1] or '?'} (its {side} language: {own})"
            )
    return plain


@dataclass(frozen=True)
class PairPick:
    """``--pair SOURCE-TARGET=MODEL``: the model the LibreTranslate API sends that pair to, whatever else serves it."""

    source: str
    target: str
    model: str

    def __str__(self) -> str:
        return f"{self.source}-{self.target}={self.model}"


def parse_pairs(items: tuple[str, ...]) -> tuple[PairPick, ...]:
    """``SOURCE-TARGET=MODEL`` items (``SOURCE:TARGET=MODEL`` where a code holds a hyphen, as "zh-Hant" does);
    ValueError naming the item and what is wrong."""
    picks: dict[tuple[str, str], PairPick] = {}
    for item in items:
        pair, sep, model = item.partition("=")
        if not sep or not model.strip() or not pair.strip():
            raise ValueError(f"--pair {item!r}: expected SOURCE-TARGET=MODEL, e.g. en-ja=translate-en-ja")
        source, target = _split_pair(item, pair.strip())
        if source == target:
            raise ValueError(f"--pair {item!r}: the source and target languages are the same")
        pick = PairPick(source, target, model.strip())
        if (source, target) in picks and picks[source, target] != pick:
            raise ValueError(
                f"--pair {item!r}: {source}-{target} is already given to {picks[source, target].model!r}; "
                "one model per pair"
            )
        picks[source, target] = pick
    return tuple(picks.values())


def _split_pair(item: str, pair: str) -> tuple[str, str]:
    if ":" in pair:
        splits = [tuple(pair.split(":", 1))]
    else:  # every hyphen where both sides are codes: "zh-Hant-en" splits one way only, "pt-br-en" two
        splits = [(pair[:i], pair[i + 1 :]) for i, ch in enumerate(pair) if ch == "-"]
    valid = [(s, t) for s, t in splits if _is_code(s) and _is_code(t)]
    if len(valid) == 1:
        return valid[0]
    if not valid:
        raise ValueError(
            f"--pair {item!r}: {pair!r} is not SOURCE-TARGET of two language codes (ISO 639-1, e.g. en-ja)"
        )
    raise ValueError(
        f"--pair {item!r}: {pair!r} splits several ways ({', '.join(f'{s} -> {t}' for s, t in valid)}); "
        "write it SOURCE:TARGET"
    )


def _is_code(code: str) -> bool:
    try:
        return check_language(code) is not None
    except ValueError:
        return False
