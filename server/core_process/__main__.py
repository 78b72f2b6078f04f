"""``python -m server.core_process FD LABEL``: an engine core, started by ``server/core_client/client.py``.

The signals are set before anything heavy is imported: a terminal's Ctrl-C, timeout(1) and systemd signal the whole
process group, maybe while this core still imports ONNX Runtime and loads its bundle. Python's default would kill it
then, and the front end would see a core die; instead a SIGTERM that early is kept, and the core drains (nothing to
finish) as soon as it can, the way it does on a later one. The label only names the process for ps and top.
"""

import signal
import sys

early_sigterm: list[int] = []
signal.signal(signal.SIGTERM, lambda signum, _frame: early_sigterm.append(signum))
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the front end drains the cores, in order

from multiprocessing.connection import Connection  # noqa: E402  (after the signals, on purpose)

from server.core_process.process import main  # noqa: E402

channel = Connection(int(sys.argv[1]))
main(channel, channel.recv(), terminated_early=lambda: bool(early_sigterm))
