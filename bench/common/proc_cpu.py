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


def tree_split_s(pid: int, role) -> dict[str, float]:
    """CPU seconds of ``pid``'s process tree summed by ``role(pid, depth, comm)`` (a label per process), so a
    server's front end, its workers and any process it spawned can be told apart."""
    procs = _procs()
    kids: dict[int, list[int]] = {}
    for p, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(p)
    out: dict[str, float] = {}
    todo = [(pid, 0)]
    while todo:
        p, depth = todo.pop()
        if p in procs:
            try:
                comm = Path(f"/proc/{p}/comm").read_text().strip()
            except OSError:
                comm = "?"
            key = role(p, depth, comm)
            out[key] = out.get(key, 0.0) + procs[p][1] / os.sysconf("SC_CLK_TCK")
        todo += [(k, depth + 1) for k in kids.get(p, [])]
    return out


def threads_cpu_s(pid: int, tids: tuple[int, ...]) -> float:
    """CPU seconds of some threads of one process (a library's worker threads, inside a Python server)."""
    ticks = 0
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")
