"""The LibreTranslate API (``/translate``, ``/languages``, ``/detect``), as LibreTranslate serves it.

Clients written for LibreTranslate (``libretranslatepy``, the browser extensions, the many apps
that take a LibreTranslate URL) work against this server unchanged. Requests may be JSON or form
encoded (``libretranslatepy`` sends ``application/x-www-form-urlencoded``, even on ``GET
/languages``); the key is the ``api_key`` field, which is the bearer token (``--auth-token``), or the
``Authorization: Bearer`` header.

Languages come from the bundles: a served model whose ``config.json`` declares ``source_language``
and ``target_language`` (``s2s export --source-lang/--target-lang``) serves that pair, a multilingual one
(``s2s import`` of M2M100 or NLLB) each of its languages to each other, at its latest loaded version; a model
that declares no languages (addition) is not offered here. ``source`` and ``target`` pick the model and, for a
multilingual one, the languages it is asked for. Where several models serve a pair, ``s2s serve --pair
en-ja=MODEL`` picks one; otherwise a fixed rule does (``server/doors/libretranslate_pairs.py``), and the log says
at start which model each pair goes to.

``POST /translate``: ``q`` (a string or a list of strings), ``source`` (a code or ``auto``), ``target``,
``format`` (``text``, the default, or ``html``), ``alternatives`` (default 0), ``api_key``, and this server's
``protect_spans``, ``keep_numbers``, ``split_long`` (true by default; false turns each off: docs/DECODING.md). The answer is
``{"translatedText": "..."}`` for a string ``q``, a list for a list. ``format=html`` translates the text
between the tags (all text nodes of the request in one batched call) and keeps the markup as it was
sent; ``<script>``/``<style>`` content and whitespace-only text are left alone. ``source=auto`` is
taken when exactly one served source language translates to ``target`` (the answer then says so in
``detectedLanguage``, as LibreTranslate does); otherwise 400 names the choices. ``alternatives`` = N > 0
asks for N + 1 distinct texts (N at most the model's max beam width - 1; the beam is widened as needed, see
``server/models/distinct.py``): ``translatedText`` is the best hypothesis and ``"alternatives"`` the N next
different texts, best first (fewer only where even the widest beam holds no more) (per text for a list ``q``; for
``format=html``, alternative i renders every text node's i-th next hypothesis into the markup).

``GET /languages``: every language of the served pairs with the codes it translates to.

``POST /detect``: there is no language detector here. The answer is given only when it is honest:
when every served translation model reads the same language, that is the only language this server
can translate from, so it is the answer for any input that can be translated at all; otherwise 400.

Errors are ``{"error": "..."}``: 400 malformed or out-of-limit input (the model API names the limit),
an unknown pair (naming what is served); 401 no or wrong key; 429/503/504 as the model API raises them.
"""

from __future__ import annotations

import asyncio
import functools
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import MultiDict

from contract.decoding import DecodingOptions
from server.doors.http_door import HttpDoor
from server.doors.libretranslate_html import check_html, parse_all
from server.doors.libretranslate_languages import languages
from server.doors.libretranslate_pairs import AUTO, PairLog, resolve, served, unloaded_model
from server.errors import InvalidInput, ModelNotReady, clip
from server.models.text_plan import TextOptions
from server.transport.http_body import deadline_of, json_response, parse_json_off_loop, read_body, read_json
from server.transport.http_forms import multipart, urlencoded
from server.transport.offload import off_loop, off_loop_if

_COUNT = re.compile(r"\s*[0-9]{1,9}\s*")
FORMATS = ("text", "html")


# ---- the request body ------------------------------------------------------------------------------------------
async def _params(request: web.Request) -> MultiDict | dict:
    """The fields of a request: a JSON object body, or form fields (urlencoded or multipart, on any method: the
    libretranslatepy client sends its form on GET /languages too) over the query string's."""
    fields = MultiDict(request.query)
    if not request.can_read_body:
        return fields
    if request.content_type == "application/json":
        return await read_json(request)
    if request.content_type == "multipart/form-data" and request.method == "POST":
        return MultiDict(
            {**fields, **await multipart(request.headers.get("Content-Type", ""), await read_body(request))}
        )
    text = _utf8(await read_body(request))
    if text.lstrip().startswith("{"):  # JSON sent without its content type (curl -d '{...}')
        return await parse_json_off_loop(text)
    form = MultiDict(await urlencoded(text))
    return MultiDict({**fields, **{k: form[k] for k in form}})  # the first of a repeated field, as Flask's


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(f"the request body is not valid UTF-8 ({e.reason} at byte {e.start})") from None


async def _read(doors: HttpDoor, request: web.Request, method: str) -> MultiDict | dict:
    """The request's fields, once it is authenticated (api_key in them, or the header)."""
    try:
        params = await _params(request)
    except InvalidInput:
        doors.check_auth(request)  # an unreadable body carries no key: only the header can authenticate
        raise
    except (
        asyncio.CancelledError,
        ConnectionError,
    ):  # hung up mid-body: counted as a cancelled call of its own
        doors.tracker.count(method, "http", "CANCELLED")
        raise
    key = params.get("api_key")
    doors.check_auth(request, key if isinstance(key, str) and key else None)
    return params


def _string(params, key: str, required: bool = True) -> str | None:
    value = params.get(key)
    if value is None or value == "":
        if required:
            raise InvalidInput(f"Invalid request: missing {key} parameter")
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"Invalid request: {key} must be a string, not {type(value).__name__}")
    return value


@dataclass(frozen=True)
class TranslateRequest:
    texts: list[str]
    as_list: bool  # q was a list: the answer is one
    source: str  # a code or "auto"
    target: str
    format: str
    alternatives: int
    text: TextOptions = TextOptions()


def parse_translate(params) -> TranslateRequest:
    q = params.get("q")
    if q is None or q == "":
        raise InvalidInput("Invalid request: missing q parameter")
    if isinstance(q, list):
        if not q:
            raise InvalidInput("Invalid request: q is an empty list; send at least one text")
        bad = next((i for i, t in enumerate(q) if not isinstance(t, str)), None)
        if bad is not None:
            raise InvalidInput(f"Invalid request: q[{bad}] must be a string, not {type(q[bad]).__name__}")
    elif not isinstance(q, str):
        raise InvalidInput(
            f"Invalid request: q must be a string or a list of strings, not {type(q).__name__}"
        )
    source, target = _string(params, "source"), _string(params, "target")
    fmt = _string(params, "format", required=False) or "text"
    if fmt not in FORMATS:
        raise InvalidInput(f"Invalid request: format must be 'text' or 'html', not {clip(fmt)}")
    alt = params.get("alternatives", 0)
    if isinstance(alt, str) and _COUNT.fullmatch(
        alt
    ):  # ASCII digits only: str.isdigit() takes "²", int() does not
        alt = int(alt)
    if alt in (None, ""):
        alt = 0
    if not isinstance(alt, int) or isinstance(alt, bool) or alt < 0:
        raise InvalidInput(
            f"Invalid request: alternatives must be a non-negative integer, not {clip(str(alt))}"
        )
    text = TextOptions(**{key: _flag(params, key) for key in ("protect_spans", "keep_numbers", "split_long")})
    return TranslateRequest(
        q if isinstance(q, list) else [q], isinstance(q, list), source, target, fmt, alt, text
    )


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _flag(params, key: str) -> bool:
    """An on-by-default switch: JSON true/false, or a form's "true"/"false" ("1"/"0", "yes"/"no", "on"/"off")."""
    value = params.get(key)
    if value is None or value == "" or value is True or value is False:
        return value is not False
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise InvalidInput(f"Invalid request: {key} must be true or false, not {clip(str(value))}")


# ---- routes ----------------------------------------------------------------------------------------------------
def routes(doors: HttpDoor) -> list[web.RouteDef]:
    picks = doors.config.pair
    pairs = PairLog(doors.repo, picks)
    pairs.check()  # a --pair that names no served model fails the start
    pairs.update()
    doors.repo.telemetry.watch(pairs.update)  # a model loaded or unloaded: the pairs whose model changed

    async def translate(request: web.Request) -> web.Response:
        return await _translate(doors, picks, request)

    async def list_languages(request: web.Request) -> web.Response:
        await _read(doors, request, "Languages")
        return json_response(languages(served(doors.repo)))

    async def detect(request: web.Request) -> web.Response:
        return await _detect(doors, request)

    return [
        web.post("/translate", translate),
        web.get("/languages", list_languages),
        web.post("/detect", detect),
    ]


async def _translate(doors: HttpDoor, picks, request: web.Request) -> web.Response:
    """``POST /translate``: parsed and its model resolved, counted under that model (or "" when refused before)."""
    params = await _read(doors, request, "Translate")
    req, error = None, None
    try:
        req = parse_translate(params)
        name, source = resolve(served(doors.repo), req.source, req.target, picks)
    except ModelNotReady as e:  # the model --pair names for it is not loaded: 503, counted (model "")
        name, error = "", e
    except InvalidInput as e:  # counted (model ""), answered 400 by the tracker
        # An unloaded model's pair: 503 "unloaded; load it again", as KServe answers, not 400 "not served".
        name, error = (unloaded_model(doors.repo, req.source, req.target) if req else ""), e
    async with doors.track(name, "Translate"):
        if error is not None:
            if name:
                doors.repo.get(name)  # raises ModelNotReady
            raise error
        docs = None
        if req.format == "html":
            check_html(req.texts)  # cheap counts first; the parser runs off the event loop
            docs = await off_loop(parse_all, req.texts)  # in the one parse lane: many at once wait their turn
        # Looked up after the parse, not before: a reload while it ran retires the version read before it.
        model = doors.repo.get(name)
        texts = _inputs(model, name, req, docs)
        nbest = await _nbest(model, request, req, source, texts, docs)
        return json_response(_answer(req, source, nbest, docs))


def _inputs(model, name: str, req: TranslateRequest, docs) -> list[str]:
    """The model's inputs: each ``q``, or with ``format=html`` every text node of every document (at most the
    model's max inputs); the alternatives asked for checked against its max beam."""
    if docs is not None:
        texts = [t for d in docs for t in d.texts()]
        if len(texts) > model.limits.max_inputs:
            raise InvalidInput(
                f"format=html: q has {len(texts)} text nodes; model {name!r} translates at most "
                f"{model.limits.max_inputs} in one request (each text node is one input)"
            )
    else:
        texts = req.texts
    if req.alternatives + 1 > model.limits.max_beam:
        raise InvalidInput(
            f"alternatives={req.alternatives} is out of range for model {name!r}: 0 to "
            f"{model.limits.max_beam - 1} (each alternative is one more beam hypothesis)"
        )
    return texts


async def _nbest(
    model, request: web.Request, req: TranslateRequest, source: str, texts: list[str], docs
) -> list[list[str]]:
    """Per input, its alternatives + 1 hypotheses' texts, best first (nothing to translate: none)."""
    n = req.alternatives + 1
    # Alternatives are shown to a person: distinct texts (server/models/distinct.py widens the beam as needed).
    options = DecodingOptions(num_hypotheses=n, distinct_hypotheses=n > 1)
    if not texts:  # html with no text in it is answered as it came
        return []
    try:
        prepare = functools.partial(
            model.prepare, texts, options, text=req.text, source_language=source, target_language=req.target
        )
        prepared = await off_loop_if(model.long(texts), prepare)
    except InvalidInput as e:
        raise InvalidInput(f"format=html, each text node is one input: {e}" if docs else str(e)) from None
    g = await model.generate(prepared, deadline_of(request))
    return [[h.text for h in o.hypotheses] for o in g.outputs]


def _rendered(nbest: list[list[str]], docs, rank: int) -> list[str]:
    """Each q's translation from every input's rank-th hypothesis (its last where it has fewer)."""
    outputs = [hyps[min(rank, len(hyps) - 1)] for hyps in nbest]
    if docs is None:
        return outputs
    out, k = [], 0
    for d in docs:
        out.append(d.render(outputs[k : k + len(d.nodes)]))
        k += len(d.nodes)
    return out


def _answer(req: TranslateRequest, source: str, nbest: list[list[str]], docs) -> dict[str, Any]:
    """LibreTranslate's answer: ``translatedText``, ``detectedLanguage`` for ``source=auto``, ``alternatives``."""
    results = _rendered(nbest, docs, 0)
    body: dict[str, Any] = {"translatedText": results if req.as_list else results[0]}
    if req.source == AUTO:
        # The one source language that translates to target (resolve() refuses otherwise): not a guess.
        detected = {"confidence": 100.0, "language": source}
        body["detectedLanguage"] = [detected] * len(results) if req.as_list else detected
    if req.alternatives > 0:
        alternatives = [_rendered(nbest, docs, rank) for rank in range(1, req.alternatives + 1)]  # [rank][q]
        # Distinct from the translation and from each other (an html document can repeat one where
        # its text nodes ran out of different hypotheses); fewer only where the model has no more.
        per_q = [
            list(dict.fromkeys(alt[q] for alt in alternatives if alt[q] != results[q]))
            for q in range(len(results))
        ]
        body["alternatives"] = per_q if req.as_list else per_q[0]
    return body


async def _detect(doors: HttpDoor, request: web.Request) -> web.Response:
    """``POST /detect``: the one source language every served model reads, or 400."""
    params = await _read(doors, request, "Detect")
    _string(params, "q")  # LibreTranslate's own refusal of a request without text
    sources = sorted({s for c in served(doors.repo) for s in c.offered.sources})
    if len(sources) != 1:
        why = (
            "no served model declares its languages"
            if not sources
            else f"this server has no language detector and serves several source languages ({', '.join(sources)})"
        )
        raise InvalidInput(f"language detection is not available: {why}; send source explicitly")
    # Honest without a detector: every model here reads this one language, so it is the only source this
    # server can translate from; for any text it can translate, this is the language to send.
    return json_response([{"confidence": 100.0, "language": sources[0]}])
