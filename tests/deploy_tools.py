"""What the offline deployment checks share: a PromQL expression checked against the metrics the server
exports and the recording rules (tests/monitoring.py), and external tools found or skipped, then run.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from monitoring import EXPORTED_METRICS, TARGET_LABELS, exported_family, promql_parts, series_labels


def check_expr(where: str, expr: str, rules: dict[str, frozenset[str]]) -> set[str]:
    names, selectors, grouping = promql_parts(expr)
    assert names, f"{where}: no metric in {expr!r}"
    available: set[str] = set(TARGET_LABELS)
    for name in names:
        if name in rules:
            available |= rules[name]
        else:
            assert exported_family(name), (
                f"{where}: {name!r} is neither an exported metric ({sorted(EXPORTED_METRICS)}) "
                f"nor a recording rule of rules.yml ({sorted(rules)})"
            )
            available |= series_labels(name)
    for name, matchers in selectors:
        labels = rules[name] if name in rules else series_labels(name)
        unknown = matchers - labels - TARGET_LABELS
        assert not unknown, f"{where}: {name} has no label(s) {sorted(unknown)} in {expr!r}"
    assert grouping <= available, f"{where}: grouping by {sorted(grouping - available)} in {expr!r}"
    return names


def need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} not installed: apt-get install {package} (done by `make system-deps`)")
    return path


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
