"""The front end's side of an engine core's pipe, on the wire: length-prefixed pickles, as
``multiprocessing.connection.Connection`` frames them (the core reads and writes with a plain ``Connection``).

The front end reads without ``Connection``: its ``poll()`` builds a selector and its ``recv()`` makes two
system calls per message, for every message, on the event loop. ``FrameReader.read`` takes whatever the
socket holds in one non-blocking ``recv_into`` and cuts it into messages (at C=64, several reports a call).
"""

from __future__ import annotations

import pickle
import socket
import struct

_HEADER = struct.Struct("!i")
_LONG = struct.Struct("!Q")  # after a header of -1: a frame over 2 GiB (Connection's own rule)
CHUNK = 1 << 18  # bytes one recv may take


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


class FrameReader:
    def __init__(self) -> None:
        self._buf = bytearray()
        self._chunk = bytearray(CHUNK)

    def read(self, sock: socket.socket) -> tuple[list, bool]:
        """The whole messages the socket holds now, and whether its far end has closed (EOF)."""
        view, eof = memoryview(self._chunk), False
        while True:
            try:
                n = sock.recv_into(view, CHUNK, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                eof = True
                break
            if n == 0:
                eof = True
                break
            self._buf += view[:n]
            if n < CHUNK:
                break
        return self._messages(), eof

    def _messages(self) -> list:
        buf, out, at = self._buf, [], 0
        with memoryview(buf) as view:  # released before the buffer is cut below
            while len(buf) - at >= 4:
                (n,) = _HEADER.unpack_from(buf, at)
                head = 4
                if n == -1:
                    if len(buf) - at < 12:
                        break
                    (n,) = _LONG.unpack_from(buf, at + 4)
                    head = 12
                if len(buf) - at - head < n:
                    break
                out.append(pickle.loads(view[at + head : at + head + n]))
                at += head + n
        if at:
            del buf[:at]
        return out
