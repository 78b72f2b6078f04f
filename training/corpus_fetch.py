"""The network half of the corpus build: pinned wheels and debs downloaded (pip, apt-get) into the cache,
their catalogs and licence files extracted, and the one-off writer of the Debian pins."""

from __future__ import annotations

import concurrent.futures
import fnmatch
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from training.corpus_licences import LICENSE_FILE_RE, LicenseCheck, check_license, debian_license
from training.corpus_sources import (
    DEB_PATTERNS,
    EXPLICIT_SOURCES,
    MAX_DEB_BYTES,
    PINS_FILE,
    PIP_PYTHON_VERSION,
    Source,
    is_reserved,
)

try:  # tqdm is in the [train] extra; the build still runs (without bars) if it is missing
    from tqdm import tqdm
except ImportError:  # pragma: no cover

    def tqdm(it=None, **_kw):  # type: ignore[no-redef]
        return it


class FetchError(RuntimeError):
    pass


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def _wheel_path(src: Source, downloads: Path) -> Path | None:
    norm = re.sub(r"[-_.]+", "_", src.package).lower()
    for p in sorted(downloads.glob("*.whl")):
        name, version = p.name.split("-")[:2]
        if re.sub(r"[-_.]+", "_", name).lower() == norm and version == src.version:
            return p
    return None


def fetch_wheel(src: Source, downloads: Path) -> Path:
    """``pip download --no-deps --only-binary=:all: NAME==VERSION`` into the cache (once)."""
    found = _wheel_path(src, downloads)
    if found:
        return found
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        PIP_PYTHON_VERSION,
        f"{src.package}=={src.version}",
        "-d",
        str(downloads),
    ]
    proc = _run(cmd)
    found = _wheel_path(src, downloads)
    if proc.returncode != 0 or found is None:
        raise FetchError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return found


def _deb_version(deb: Path) -> str:
    proc = _run(["dpkg-deb", "-f", str(deb), "Version"])
    if proc.returncode != 0:
        raise FetchError(f"dpkg-deb -f {deb} failed: {proc.stderr}")
    return proc.stdout.strip()


def fetch_deb(src: Source, downloads: Path) -> tuple[Path, str]:
    """``apt-get download NAME[=PIN]`` into the cache (once); ``apt-get update`` only if that fails.

    Debian moves on (security updates replace the pinned revision): if the pin is no longer
    downloadable the current version is taken, with a warning, and recorded in NOTICE.md."""

    def present() -> list[Path]:
        return sorted(downloads.glob(f"{src.package}_*.deb"))

    for deb in present():
        if _deb_version(deb) == src.version:
            return deb, src.version
    attempts = [f"{src.package}={src.version}", src.package]
    errors = []
    for update in (False, True):
        if update:
            proc = _run(["apt-get", "update"])
            if proc.returncode != 0:
                errors.append(f"apt-get update: {proc.stderr[-1000:]}")
        for spec in attempts:
            before = set(present())
            proc = _run(["apt-get", "download", spec], cwd=downloads)
            new = [p for p in present() if p not in before] or present()
            if proc.returncode == 0 and new:
                deb = new[-1]
                version = _deb_version(deb)
                if version != src.version:
                    print(
                        f"WARNING: {src.package}: pinned {src.version}, downloaded {version} (Debian moved on); "
                        "proceeding - NOTICE.md records the version used",
                        file=sys.stderr,
                    )
                return deb, version
            errors.append(f"apt-get download {spec}: {proc.stderr.strip()[-1000:]}")
    raise FetchError(f"could not download {src.package}:\n" + "\n".join(errors))


def _matches(member: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(member, pat) for pat in patterns)


_EXTRACT_FORMAT = "3"  # bump when extract() keeps different members, so caches are refreshed


def extract(src: Source, archive: Path, version: str, extracted: Path) -> Path:
    """Unpack the catalogs of one archive into ``extracted/NAME-VERSION`` (once) and return that root.

    Wheels: only the members matching the source's patterns, plus the dist-info METADATA and
    licence files; debs: the same, plus ``usr/share/doc/*/copyright``."""
    root = extracted / f"{src.name}-{version.replace(':', '_')}"
    done = root / ".complete"
    stamp = f"{_EXTRACT_FORMAT} {archive.name} {' '.join(src.patterns)}\n"
    if done.exists() and done.read_text() == stamp:
        return root
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    if src.kind == "wheel":
        with zipfile.ZipFile(archive) as zf:
            members = sorted(
                m
                for m in zf.namelist()
                if _matches(m, src.patterns) or m.endswith(".dist-info/METADATA") or LICENSE_FILE_RE.search(m)
            )
            zf.extractall(root, members)
    else:  # only the catalogs and the copyright files: `dpkg-deb --fsys-tarfile | tar -x PATTERNS`
        wanted = [f"./{pat}" for pat in src.patterns] + ["./usr/share/doc/*/copyright"]
        proc = subprocess.run(
            f"dpkg-deb --fsys-tarfile {shlex.quote(str(archive))} | tar -x -C {shlex.quote(str(root))} "
            "--wildcards " + " ".join(shlex.quote(w) for w in wanted),
            shell=True,
            capture_output=True,
            text=True,
        )
        # tar exits 2 when a pattern matches nothing (a package without a copyright file of its own)
        errors = [
            ln
            for ln in proc.stderr.splitlines()
            if ln.strip() and "Not found in archive" not in ln and "Exiting with failure" not in ln
        ]
        if errors:
            raise FetchError(f"extracting {archive} failed: {proc.stderr}")
    done.write_text(stamp)
    return root


def find_catalogs(root: Path, patterns: Sequence[str]) -> list[Path]:
    return sorted(
        p for p in root.rglob("*") if p.is_file() and _matches(p.relative_to(root).as_posix(), patterns)
    )


@dataclass
class Fetched:
    source: Source
    version: str  # the version actually used
    archive: Path
    catalogs: list[Path]
    license: LicenseCheck


def fetch_source(src: Source, cache: Path) -> Fetched:
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    if src.kind == "wheel":
        archive, version = fetch_wheel(src, downloads), src.version
    else:
        archive, version = fetch_deb(src, downloads)
    root = extract(src, archive, version, cache / "extracted")
    catalogs = find_catalogs(root, src.patterns)
    if not catalogs:
        raise FetchError(f"{src.package} {version}: no Japanese catalog matches {src.patterns}")
    lic = check_license(src, root)
    if not lic.agrees:
        print(
            f"WARNING: {src.package} {version}: pinned licence {src.license}, the package says: {lic.evidence}",
            file=sys.stderr,
        )
    return Fetched(src, version, archive, catalogs, lic)


FETCH_WORKERS = 8  # downloads and extraction wait on the network and dpkg-deb, not on Python


def fetch_all(sources: Sequence[Source], cache: Path, progress: bool = True) -> list[Fetched]:
    """:func:`fetch_source` for every source, :data:`FETCH_WORKERS` at a time; results in ``sources`` order."""
    with concurrent.futures.ThreadPoolExecutor(FETCH_WORKERS) as pool:
        futures = [pool.submit(fetch_source, src, cache) for src in sources]
        for _ in tqdm(
            concurrent.futures.as_completed(futures),
            total=len(futures),
            desc="fetch",
            unit="pkg",
            disable=not progress,
        ):
            pass
    return [f.result() for f in futures]  # re-raises the first FetchError


_CONTENTS_RE = re.compile(r"^(\S*(?:^|/)ja(?:_JP)?(?:\.UTF-8)?/LC_MESSAGES/\S+\.mo)\s+(\S+)$")


def packages_with_ja_catalogs(contents: Sequence[Path]) -> list[str]:
    """Binary packages that ship a Japanese ``.mo``, per Debian's ``Contents-*.gz`` indexes."""
    import gzip

    pkgs: set[str] = set()
    for path in contents:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if "/LC_MESSAGES/" in line and (m := _CONTENTS_RE.match(line.rstrip("\n"))):
                    pkgs.update(q.rsplit("/", 1)[-1] for q in m.group(2).split(","))
    return sorted(pkgs)


def write_pins(contents: Sequence[Path], cache: Path, out: Path = PINS_FILE) -> int:
    """The one-off helper behind :data:`PINS_FILE`: every bookworm package with a Japanese catalog
    (from ``contents``), its candidate version (``apt-cache show``), downloaded and extracted
    into ``cache``, and the licence of its ``debian/copyright``. Reserved projects, packages over
    :data:`MAX_DEB_BYTES` and packages already in :data:`EXPLICIT_SOURCES` are left out (listed
    as comments)."""
    explicit = {s.package for s in EXPLICIT_SOURCES}
    pkgs = packages_with_ja_catalogs(contents)
    reserved = [p for p in pkgs if is_reserved(p)]
    pkgs = [p for p in pkgs if p not in explicit and p not in reserved]
    proc = _run(["apt-cache", "show", "--no-all-versions", *pkgs])
    info: dict[str, tuple[str, int]] = {}
    for para in proc.stdout.split("\n\n"):
        f = dict(ln.split(": ", 1) for ln in para.splitlines() if ": " in ln and not ln.startswith(" "))
        if "Package" in f:
            info.setdefault(f["Package"], (f["Version"], int(f.get("Size", 0))))
    too_big = sorted(p for p in pkgs if p in info and info[p][1] > MAX_DEB_BYTES)
    missing = sorted(p for p in pkgs if p not in info)
    cands = [
        Source(p, "deb", p, info[p][0], "?", DEB_PATTERNS) for p in pkgs if p in info and p not in too_big
    ]
    rows, empty = [], []

    def one(src: Source) -> tuple[Source, str, str, int]:
        downloads = cache / "downloads"
        deb, version = fetch_deb(src, downloads)
        root = extract(src, deb, version, cache / "extracted")
        spdx, how, _ = debian_license(root, src.package)
        return replace(src, version=version), spdx, how, len(find_catalogs(root, src.patterns))

    with concurrent.futures.ThreadPoolExecutor(FETCH_WORKERS) as pool:
        for src, spdx, how, n in tqdm(pool.map(one, cands), total=len(cands), desc="pins", unit="pkg"):
            (rows if n else empty).append((src.package, src.version, spdx, how))
    lines = [
        "# Debian bookworm packages whose Japanese gettext catalogs feed the en-ja corpus (training/corpus_en_ja.py).",
        "# Written once by `python -m training.corpus_en_ja --write-pins --contents Contents-amd64.gz "
        "--contents Contents-amd64-arch.gz`, then committed.",
        "# package<TAB>version<TAB>licence (SPDX, from debian/copyright)<TAB>where the licence was read",
        f"# left out, reserved projects: {' '.join(reserved) or '-'}",
        f"# left out, over {MAX_DEB_BYTES // 1_000_000} MB: {' '.join(too_big) or '-'}",
        f"# left out, no readable Japanese catalog in the package: {' '.join(p for p, *_ in empty) or '-'}",
        f"# left out, not in the apt lists: {' '.join(missing) or '-'}",
    ] + ["\t".join(r) for r in sorted(rows)]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(rows)} packages")
    return 0


# --------------------------------------------------------------------------- reporting
