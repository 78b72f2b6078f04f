"""Gettext catalogs for the en-ja corpus builder's tests, written into tmp_path: the header every catalog
starts with, a catalog shared by several tests, and the writer.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

HEADER = """\
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Language: ja\\n"
{extra}
"""

OTHER = """
msgid "Open"
msgstr "オープン"

msgid "Save"
msgstr "保存する"

msgid "Close"
msgstr "閉じる"
"""


def _po(path: Path, body: str, extra_header: str = "") -> Path:
    path.write_text(HEADER.format(extra=extra_header) + textwrap.dedent(body), encoding="utf-8")
    return path
