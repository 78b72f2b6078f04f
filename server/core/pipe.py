"""An engine core's pipe on the wire: length-prefixed pickles, as ``multiprocessing.connection.Connection``
frames them. Both ends read with ``Connection``; the front end writes these frames itself, without blocking
(``server/core/client.py``), and the core pickles outside its send lock.
"""

from __future__ import annotations

import pickle
import struct

_HEADER = struct.Struct("!i")
_LONG = struct.Struct("!Q")  # after a header of -1: a frame over 2 GiB (Connection's own rule)


def dumps(message) -> bytes:
    """A message's pickle: plain ``pickle`` (the messages hold no file descriptors or sockets, what
    ``ForkingPickler``, which copies its reducer table on every call, is for)."""
    return pickle.dumps(message, pickle.HIGHEST_PROTOCOL)


def frame(message) -> bytes:
    """One message as ``Connection.recv`` reads it."""
    data = dumps(message)
    if len(data) > 0x7FFFFFFF:
        return _HEADER.pack(-1) + _LONG.pack(len(data)) + data
    return _HEADER.pack(len(data)) + data
