"""An engine core's pipe on the wire: length-prefixed pickles, as ``multiprocessing.connection.Connection``
frames them. The core reads and writes with ``Connection``; the front end writes these frames itself, without blocking
(``server/core/client.py``), and reads them with ``FrameReader``; the core pickles outside its send lock.
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


class FrameReader:
    """The front end's reading of a core's frames: whatever the socket holds, in one ``recv_into`` per wake-up,
    cut into messages here. ``Connection.recv`` costs a ``poll`` and two reads a message, and one more ``poll``
    to find the pipe empty: four system calls a report where one does."""

    __slots__ = ("_sock", "_buf", "_view", "_pending")

    def __init__(self, sock, size: int = 1 << 18):
        self._sock = sock
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._pending = bytearray()  # the start of a frame the socket has not delivered whole yet

    def read(self) -> list | None:
        """The messages complete so far ([] where none is); None: EOF, the core is gone. Never blocks.
        Raises OSError where the socket failed."""
        try:
            n = self._sock.recv_into(self._buf, 0, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return []
        if n == 0:
            return None
        if self._pending:
            self._pending += self._view[:n]
            data = memoryview(self._pending)
        else:
            data = self._view[:n]
        out, at, end = [], 0, len(data)
        while end - at >= 4:
            (size,) = _HEADER.unpack_from(data, at)
            start = at + 4
            if size == -1:
                if end - at < 12:
                    break
                (size,) = _LONG.unpack_from(data, start)
                start += 8
            if end - start < size:
                break
            out.append(pickle.loads(data[start : start + size]))
            at = start + size
        rest = bytes(data[at:])  # a copy: ``data`` may be the buffer the next read overwrites
        data.release()
        self._pending = bytearray(rest)
        return out


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
