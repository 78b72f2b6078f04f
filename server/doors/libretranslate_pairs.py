"""Which served model the LibreTranslate API sends a request's ``source`` -> ``target`` to, and the log that says so.

Every served model that offers languages (``server/models/languages.py``, at its latest loaded version) serves its
pairs: a model made for one pair (``source_language`` / ``target_language`` in its bundle) that pair, a
multilingual one (M2M100, NLLB: ``languages`` in its bundle) each of its languages to each other.

A pair goes to the model ``s2s serve --pair SOURCE-TARGET=MODEL`` names for it. A pair nobody picked goes, where
several models serve it, by one fixed rule (``served``):

1. a model made for that one pair before a multilingual one;
2. a model exported here (``s2s export``: its bundle records no ``origin``) before one brought in by ``s2s
   import`` (an OPUS-MT folder naming its languages in tokenizer_config.json): a model dropped into the
   repository never takes a pair from the repository's own model by the order of names;
3. the first by name among equals.

At start, and whenever a model is loaded or unloaded, the log says which model each pair goes to, one line per
pair ("LibreTranslate en→ja: translate-en-ja v2"), and each multilingual model once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from server.errors import InvalidInput, ModelNotFound, ModelNotReady, clip
from server.models.languages import Offered, PairPick

log = logging.getLogger("s2s.libretranslate")
AUTO = "auto"


@dataclass(frozen=True)
class Candidate:
    """A served model that offers languages, as routing compares it."""

    name: str
    version: str
    offered: Offered
    imported: bool  # brought in by `s2s import` (its bundle records an origin)

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"


Served = list[Candidate]  # in routing order


def served(repo) -> Served:
    """The served models that offer languages, in routing order (the module's rule: one-pair models before
    multilingual ones, exported before imported, then by name)."""
    found = []
    for name in sorted(repo.models):
        model = repo.get(name)
        if model.offered is not None:
            found.append(Candidate(name, model.version, model.offered, model.bundle.origin is not None))
    return sorted(found, key=lambda c: (c.offered.multilingual is not None, c.imported, c.name))


def serves(o: Offered, source: str, target: str) -> bool:
    return (
        o.knows(source, "source")
        and o.knows(target, "target")
        and (source != target or o.multilingual is None)
    )


def _describe(models: Served) -> str:
    out = []
    for c in models:
        o = c.offered
        if o.multilingual is None:
            out.append(f"{o.sources[0]} -> {o.targets[0]} ({c.name})")
        else:
            out.append(f"{len(o.targets)} languages each to each other ({c.name}: {', '.join(o.targets)})")
    return "; ".join(out) or "none (no served model declares its languages)"


def _picked(models: Served, pick: PairPick) -> Candidate:
    """The model --pair names for its pair; ModelNotReady where it does not serve the pair now."""
    c = next((c for c in models if c.name == pick.model), None)
    flag = f"--pair {pick}"
    if c is None:
        raise ModelNotReady(
            f"{pick.source} -> {pick.target} goes to model {clip(pick.model)} ({flag}), which is not loaded"
        )
    if not serves(c.offered, pick.source, pick.target):
        raise ModelNotReady(
            f"{pick.source} -> {pick.target} goes to model {pick.model!r} ({flag}), but its version "
            f"{c.version} does not translate that pair"
        )
    return c


def resolve(models: Served, source: str, target: str, picks: tuple[PairPick, ...] = ()) -> tuple[str, str]:
    """(model name, source language) for a request's source (a code or "auto") and target; InvalidInput naming
    what is served otherwise (ModelNotReady where the model --pair names for it is not loaded)."""
    if source == AUTO:
        choices = sorted(
            {
                s
                for c in models
                if c.offered.knows(target, "target")
                for s in c.offered.sources
                if serves(c.offered, s, target)
            }
        )
        if len(choices) == 1:
            return resolve(models, choices[0], target, picks)[0], choices[0]
        if not choices:
            raise InvalidInput(
                f"source=auto: no served model translates to {clip(target)}; served: {_describe(models)}"
            )
        raise InvalidInput(
            f"source=auto: this server has no language detector and several source languages translate "
            f"to {clip(target)} ({', '.join(choices)}); send one of them as source"
        )
    pick = next((p for p in picks if (p.source, p.target) == (source, target)), None)
    if pick is not None:
        return _picked(models, pick).name, source
    for c in models:
        if serves(c.offered, source, target):
            return c.name, source
    raise InvalidInput(f"{clip(source)} -> {clip(target)} is not served; served: {_describe(models)}")


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


# ---- what the log says ------------------------------------------------------------------------------------------
def routes(models: Served, picks: tuple[PairPick, ...]) -> dict[str, str]:
    """Each pair a one-pair model serves or --pair names ("en→ja"), and each multilingual model ("m2m"), with
    the line the log says about it."""
    pairs = {(c.offered.sources[0], c.offered.targets[0]) for c in models if c.offered.multilingual is None}
    pairs |= {(p.source, p.target) for p in picks}
    out = {}
    for source, target in sorted(pairs):
        key = f"{source}→{target}"
        try:
            name, _ = resolve(models, source, target, picks)
        except ModelNotReady as e:
            out[key] = f"LibreTranslate {key}: not served ({e})"
            continue
        chosen = next(c for c in models if c.name == name)
        others = [c.label for c in models if c.name != name and serves(c.offered, source, target)]
        if any((p.source, p.target) == (source, target) for p in picks):
            why = f"--pair {source}-{target}={name}"
        elif others:
            why = "chosen over " + ", ".join(others) + " by the rule of server/doors/libretranslate_pairs.py"
        else:
            why = ""
        out[key] = f"LibreTranslate {key}: {chosen.label}" + (f" ({why})" if why else "")
    for c in models:
        if c.offered.multilingual is not None:
            n = len(c.offered.targets)
            out[c.name] = (
                f"LibreTranslate: {c.label} translates each of its {n} languages to each other, where no "
                "model above serves the pair"
            )
    return out


class PairLog:
    """Logs the pairs' models at start, and each pair whose model changes when models load or unload."""

    def __init__(self, repo, picks: tuple[PairPick, ...]):
        self.repo, self.picks = repo, picks
        self.said: dict[str, str] = {}

    def check(self) -> None:
        """At start, where the repository is read once (--model-control-mode none): every --pair names a served
        model that translates its pair, or the start fails naming it. In the other modes a model may be loaded
        later; until then its pair answers 503 naming the --pair."""
        models = served(self.repo)
        for pick in self.picks:
            try:
                _picked(models, pick)
            except ModelNotReady as e:
                if self.repo.mode == "none":
                    names = ", ".join(sorted(self.repo.models)) or "none"
                    raise ModelNotFound(f"{e} (served: {names})") from None
                log.warning("%s", e)

    def update(self) -> None:
        now = routes(served(self.repo), self.picks)
        for key, line in now.items():
            if self.said.get(key) != line:
                log.info("%s", line)
        for key in self.said.keys() - now.keys():
            log.info("LibreTranslate %s: no longer served", key)
        self.said = now
