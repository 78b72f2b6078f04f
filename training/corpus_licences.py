"""Which licence a fetched package is under: its wheel metadata and licence file, or Debian's
copyright file, as SPDX expressions (checked against the pin)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from training.corpus_sources import Source

#: a wheel's licence files (also kept by the extraction)
LICENSE_FILE_RE = re.compile(r"\.dist-info/(?:licenses/)?(?:LICEN[CS]E|COPYING)[^/]*$")


def classify_license_text(text: str) -> str | None:
    """SPDX id of a BSD/MIT licence text (BSD-3 has the "endorse or promote" clause), else None."""
    flat = " ".join(text.split()).lower()
    if "redistribution and use in source and binary forms" in flat:
        return "BSD-3-Clause" if "endorse or promote" in flat else "BSD-2-Clause"
    if "permission is hereby granted, free of charge" in flat:
        return "MIT"
    return None


@dataclass
class LicenseCheck:
    evidence: str  # what the package says, for NOTICE.md
    copyright: str  # the first copyright line of its licence
    agrees: bool  # the package's own statement matches the pinned SPDX id


def check_license(src: Source, root: Path) -> LicenseCheck:
    """Verify the pinned licence against the package itself: wheel METADATA (License-Expression,
    classifiers) and licence file text; Debian's machine-readable copyright file."""
    said: list[str] = []
    copyright_line = ""
    if src.kind == "wheel":
        for meta in sorted(root.glob("*.dist-info/METADATA"))[:1]:
            lines = meta.read_text(encoding="utf-8", errors="replace").splitlines()
            said += [
                f"License-Expression: {ln.split(':', 1)[1].strip()}"
                for ln in lines
                if ln.startswith("License-Expression:")
            ]
            said += [
                f"classifier: {ln.split('::')[-1].strip()}"
                for ln in lines
                if ln.startswith("Classifier: License ::")
            ]
        lic_files = sorted(
            p for p in root.glob("*.dist-info/**/*") if p.is_file() and LICENSE_FILE_RE.search(p.as_posix())
        )
        lic_files.sort(key=lambda p: (p.suffix == ".python", p.name))  # Django's LICENSE.python is secondary
        for lic in lic_files[:1]:
            text = lic.read_text(encoding="utf-8", errors="replace")
            kind = classify_license_text(text)
            said.append(f"{lic.name}: {kind or 'unrecognised'} text")
            copyright_line = next(
                (ln.strip() for ln in text.splitlines() if ln.strip().lower().startswith("copyright")), ""
            )
    else:
        spdx, how, copyright_line = debian_license(root, src.package)
        return LicenseCheck(how, copyright_line, spdx == src.license)
    evidence = "; ".join(dict.fromkeys(said)) or "not stated"
    ids = re.findall(r"(?:License-Expression: |: )(BSD-[23]-Clause|MIT|MPL-2\.0)\b", evidence)
    agrees = bool(ids) and all(i == src.license for i in ids)
    return LicenseCheck(evidence, copyright_line, agrees)


_DEB_LICENSES = {
    "expat": "MIT",
    "mit": "MIT",
    "x11": "X11",
    "isc": "ISC",
    "zlib": "Zlib",
    "0bsd": "0BSD",
    "bsd-2-clause": "BSD-2-Clause",
    "bsd-3-clause": "BSD-3-Clause",
    "bsd-4-clause": "BSD-4-Clause",
    "bsd-2": "BSD-2-Clause",
    "bsd-3": "BSD-3-Clause",
    "apache-2.0": "Apache-2.0",
    "apache-2": "Apache-2.0",
    "mpl-2.0": "MPL-2.0",
    "mpl-1.1": "MPL-1.1",
    "public-domain": "LicenseRef-public-domain",
    "cc0-1.0": "CC0-1.0",
    "cc0": "CC0-1.0",
    "psf-2": "PSF-2.0",
    "psf": "PSF-2.0",
    "python": "PSF-2.0",
    "unlicense": "Unlicense",
    "bsl-1.0": "BSL-1.0",
    "artistic": "Artistic-1.0",
    "artistic-1.0": "Artistic-1.0",
    "artistic-2.0": "Artistic-2.0",
    "ftl": "FTL",
    "postgresql": "PostgreSQL",
    "permissive": "LicenseRef-permissive",
}
_DEP5_FILES_STAR_RE = re.compile(r"^Files:\s*\*\s*\n((?:[ \t]*\S.*\n)*?)License:\s*(.+)$", re.M)


def deb_license_to_spdx(expr: str) -> str:
    """A debian/copyright ``License:`` value as an SPDX expression: ``GPL-2+`` -> ``GPL-2.0-or-later``,
    ``LGPL-2.1`` -> ``LGPL-2.1-only``, ``Expat`` -> ``MIT``, ``GPL-2+ or Artistic`` -> ``... OR Artistic-1.0``.
    Unknown names become ``LicenseRef-<name>``."""
    expr = re.sub(r"\s+with\s+.*?exception", "", expr.strip(), flags=re.I)
    out = []
    for tok in re.split(r"(\s+or\s+|\s+and\s+|\s*,\s*|\s*\|\s*)", expr, flags=re.I):
        low = tok.strip().lower()
        if not low:
            continue
        if low in ("or", "|"):
            out.append("OR")
        elif low in ("and", ","):
            out.append("AND")
        elif m := re.match(r"^(agpl|lgpl|gpl|gfdl)-(\d\.\d)-(only|or-later)$", low):  # already SPDX
            out.append(f"{m.group(1).upper()}-{m.group(2)}-{m.group(3)}")
        elif low in _DEB_LICENSES:
            out.append(_DEB_LICENSES[low])
        elif m := re.match(r"^(agpl|lgpl|gpl|gfdl)-?(\d+(?:\.\d+)?)?(\+)?$", low):
            fam, ver, plus = m.groups()
            if not ver:
                out.append(f"LicenseRef-{fam.upper()}")
                continue
            ver = ver if "." in ver else ver + ".0"
            out.append(f"{fam.upper()}-{ver}-{'or-later' if plus else 'only'}")
        elif m := re.match(r"^cc-by(-sa)?-(\d\.\d)", low):
            out.append(f"CC-BY{'-SA' if m.group(1) else ''}-{m.group(2)}")
        else:
            out.append("LicenseRef-" + re.sub(r"[^A-Za-z0-9.-]+", "-", tok.strip()).strip("-"))
    while out and out[-1] in ("OR", "AND"):
        out.pop()
    return " ".join(out) or "LicenseRef-unknown"


def _license_from_text(text: str) -> str | None:
    """SPDX id from a free-form (non-DEP-5) copyright file: the first GNU licence named, with its
    version and "or any later version"; else a BSD/MIT text; else None."""
    flat = " ".join(text.split())
    m = re.search(r"GNU (Affero |Lesser |Library |)General Public Licen[cs]e", flat)
    if m:
        fam = {"Affero ": "AGPL", "Lesser ": "LGPL", "Library ": "LGPL", "": "GPL"}[m.group(1)]
        near = flat[m.start() : m.start() + 400]
        v = re.search(r"version (\d(?:\.\d)?)", near) or re.search(
            r"common-licenses/L?A?GPL-(\d(?:\.\d)?)", flat
        )
        if not v:
            return f"LicenseRef-{fam}"
        ver = v.group(1) if "." in v.group(1) else v.group(1) + ".0"
        later = re.search(r"any later version", near, re.I)
        return f"{fam}-{ver}-{'or-later' if later else 'only'}"
    return classify_license_text(text)


def debian_license(root: Path, package: str) -> tuple[str, str, str]:
    """(SPDX expression, where it came from, copyright holders) from the package's
    ``usr/share/doc/PACKAGE/copyright`` (any other copyright file in the package if that is a
    symlink to a sibling's directory): the ``Files: *`` stanza of a DEP-5 file, else the licence
    named in the text."""
    doc = root / "usr/share/doc"
    cands = [doc / package / "copyright"] + sorted(doc.glob("*/copyright"))
    cfile = next((c for c in cands if c.is_file()), None)
    if cfile is None:
        return "LicenseRef-unknown", "no copyright file in the package", ""
    text = cfile.read_text(encoding="utf-8", errors="replace")
    where = "" if cfile.parent.name == package else f" of {cfile.parent.name}"
    m = _DEP5_FILES_STAR_RE.search(text)
    if m:
        block = re.sub(r"^Copyright:\s*", "", m.group(1).strip(), flags=re.M)
        holders = "; ".join(ln.strip().rstrip(".") for ln in block.splitlines() if ln.strip())
        return (
            deb_license_to_spdx(m.group(2)),
            f"debian/copyright{where} (Files: *): {m.group(2).strip()}",
            holders,
        )
    spdx = _license_from_text(text)
    holders = next((ln.strip() for ln in text.splitlines() if ln.strip().lower().startswith("copyright")), "")
    if spdx:
        return spdx, f"debian/copyright{where} (text)", holders
    return "LicenseRef-unknown", f"debian/copyright{where}: licence not recognised", holders
