"""An engine core's pipe on the wire: length-prefixed pickles, as ``multiprocessing.connection.Connection``
frames them. Both ends read with ``Connection``; the front end writes these frames itself, without blocking
(``FrameWriter``), and the core pickles outside its send lock.
"""

from __future__ import annotations

import pickle
import socket
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


class FrameWriter:
    """The front end's writing to a core: frames out without ever blocking. A core that hangs stops reading; once
    the pipe's buffer was full, a blocking write would stop the event loop, and every door and health check with
    it, until the watchdog killed the core. What the pipe does not take now goes when it is writable again."""

    __slots__ = ("_loop", "_sock", "unsent", "_writing")

    def __init__(self, loop, sock):
        self._loop, self._sock = loop, sock
        self.unsent = bytearray()  # framed messages the pipe has not taken yet (a busy or hung core)
        self._writing = False  # waiting for the pipe to take more

    def send(self, message) -> None:
        self.unsent += frame(message)  # Connection's framing: the core reads with recv()
        self._write()

    def _write(self) -> None:
        try:
            while self.unsent:
                del self.unsent[: self._sock.send(self.unsent, socket.MSG_DONTWAIT)]
        except BlockingIOError:
            if not self._writing:
                self._loop.add_writer(self._sock.fileno(), self._write)
                self._writing = True
            return
        except OSError:
            self.unsent.clear()  # the core is gone; EOF on the pipe reports it and fails what is in flight
        if self._writing:
            self._loop.remove_writer(self._sock.fileno())
            self._writing = False

    def close(self) -> None:
        if self._writing:
            self._loop.remove_writer(self._sock.fileno())
            self._writing = False
        self.unsent.clear()
