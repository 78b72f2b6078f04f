"""CPU time of processes from /proc (Linux): one process, its children, a whole process tree."""

from __future__ import annotations

import os
from pathlib import Path


def _procs() -> dict[int, tuple[int, int]]:
    """Every live process: pid -> (parent pid, user + system clock ticks), from /proc (empty elsewhere)."""
    procs: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return procs
    for name in names:
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                procs[int(name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
            except (OSError, ValueError, IndexError):
                continue
    return procs


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) of one process; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (a server's engine cores)."""
    return [p for p, (ppid, _) in _procs().items() if ppid == pid]


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and of every live process below it (Linux /proc; 0 elsewhere)."""
    procs = _procs()
    kids: dict[int, list[int]] = {}
    for p, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(p)
    ticks, todo = 0, [pid]
    while todo:
        p = todo.pop()
        if p in procs:
            ticks += procs[p][1]
        todo += kids.get(p, [])
    return ticks / os.sysconf("SC_CLK_TCK")
