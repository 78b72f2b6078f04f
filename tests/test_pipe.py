"""The front end's reading of a core's pipe (``server/core/pipe.py``): the frames ``Connection`` writes, cut into
messages however the socket delivers them."""

from __future__ import annotations

import socket
from multiprocessing.connection import Connection

from server.core.pipe import FrameReader


def test_reader_cuts_frames_split_across_reads_and_ends_on_eof():
    ours, theirs = socket.socketpair()
    core = Connection(
        theirs.detach()
    )  # the core's end writes with Connection, as server/core/process.py does
    reader = FrameReader(ours, size=64)  # a buffer smaller than a frame: frames arrive in pieces
    assert reader.read() == []  # nothing yet: never blocks
    big = ["x" * 500, list(range(100))]
    core.send({"a": 1})
    core.send(big)
    core.send(("last", 3))
    got = []
    while len(got) < 3:
        got += reader.read()
    assert got == [{"a": 1}, big, ("last", 3)]
    core.close()
    assert reader.read() is None
    ours.close()
