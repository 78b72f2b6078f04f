"""``format=html`` for the LibreTranslate door: an HTML string cut into its markup, kept as sent, and its
text nodes, translated and put back re-escaped.

``HTMLParser`` is pure Python: ~1 s for a megabyte of tags. So the cheap limits come first (counts with
``str.count``, which costs microseconds for a megabyte), and the door parses in a worker thread,
off the event loop that every door and the health checks share.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from html.parser import HTMLParser

from server.errors import InvalidInput

# Per request, over all of q: what a page of text for at most --max-inputs-per-request text nodes needs,
# and far less than what would keep a worker thread busy for long.
MAX_HTML_CHARS = 262_144
MAX_HTML_TAGS = 16_384  # '<' characters
MAX_HTML_ENTITIES = 65_536  # '&' characters


def check_html(texts: list[str]) -> None:
    """The cheap limits on format=html input, before any parsing; InvalidInput naming the limit."""
    chars = sum(len(t) for t in texts)
    if chars > MAX_HTML_CHARS:
        raise InvalidInput(
            f"format=html: q has {chars} characters; at most {MAX_HTML_CHARS} are parsed in one request"
        )
    tags = sum(t.count("<") for t in texts)
    if tags > MAX_HTML_TAGS:
        raise InvalidInput(f"format=html: q has {tags} '<' (tags); at most {MAX_HTML_TAGS} in one request")
    entities = sum(t.count("&") for t in texts)
    if entities > MAX_HTML_ENTITIES:
        raise InvalidInput(
            f"format=html: q has {entities} '&' (character references); at most {MAX_HTML_ENTITIES} "
            "in one request"
        )


def parse_all(texts: list[str]) -> list[HtmlDoc]:
    """Every q parsed (in a worker thread: the door calls this through asyncio.to_thread)."""
    return [HtmlDoc.parse(t) for t in texts]


class _Segments(HTMLParser):
    """Cuts an HTML string into its markup and its text nodes, each as the exact characters it was sent as.

    Every parser event starts where ``getpos()`` says; its raw text runs to the next event's start. Markup is
    kept verbatim; a text node is (raw, decoded text) so that only text is replaced, re-escaped."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)
        self.source = source
        self.line_starts = [0] + [i + 1 for i, c in enumerate(source) if c == "\n"]
        self.events: list[
            tuple[int, str | None]
        ] = []  # (offset, decoded text of a text node, or None: markup)
        self.raw_text = 0  # depth inside <script>/<style>, whose content is not text to translate

    def _mark(self, data: str | None = None) -> None:
        line, col = self.getpos()
        self.events.append((self.line_starts[line - 1] + col, data))

    def handle_starttag(self, tag, attrs):
        self._mark()
        if tag in ("script", "style"):
            self.raw_text += 1

    def handle_startendtag(self, tag, attrs):
        self._mark()

    def handle_endtag(self, tag):
        self._mark()
        if tag in ("script", "style") and self.raw_text:
            self.raw_text -= 1

    def handle_data(self, data):
        self._mark(None if self.raw_text else data)

    def handle_comment(self, data):
        self._mark()

    def handle_decl(self, decl):
        self._mark()

    def handle_pi(self, data):
        self._mark()

    def unknown_decl(self, data):
        self._mark()

    def segments(self) -> list[tuple[str, str | None]]:
        """(raw, text) in order: text None for markup (and for text kept as it is)."""
        self.feed(self.source)
        self.close()
        out: list[tuple[str, str | None]] = []
        ends = [off for off, _ in self.events[1:]] + [len(self.source)]
        if (
            self.events and self.events[0][0] > 0
        ):  # nothing should precede the first event; keep it if it does
            out.append((self.source[: self.events[0][0]], None))
        for (start, text), end in zip(self.events, ends):
            raw = self.source[start:end]
            if text is not None and out and out[-1][1] is not None:  # one text node split in two events
                prev_raw, prev_text = out.pop()
                raw, text = prev_raw + raw, prev_text + text
            out.append((raw, text))
        # A node whose raw characters are not exactly its text (markup the parser skipped without an event)
        # is kept as sent: never drop markup.
        return [(raw, text if text is not None and html.unescape(raw) == text else None) for raw, text in out]


@dataclass
class HtmlDoc:
    segments: list[tuple[str, str | None]]
    nodes: list[int]  # indexes of the segments to translate

    @classmethod
    def parse(cls, source: str) -> HtmlDoc:
        segs = _Segments(source).segments()
        return cls(segs, [i for i, (_, text) in enumerate(segs) if text is not None and text.strip()])

    def texts(self) -> list[str]:
        return [self.segments[i][1].strip() for i in self.nodes]

    def render(self, translations: list[str]) -> str:
        parts = [raw for raw, _ in self.segments]
        for i, out in zip(self.nodes, translations):
            text = self.segments[i][1]
            lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
            parts[i] = lead + html.escape(out, quote=False) + trail
        return "".join(parts)
