"""One lane for the front end's heavy pure-Python work (parsing big JSON, form and html bodies).

A worker thread keeps such work off the event loop, but not off the GIL: 32 html bodies parsed at once
in 32 threads took the GIL from the loop for 570 ms. So every heavy parse goes through one bounded pool
(``WORKERS`` threads; the rest wait their turn in order), and the loop, with the GIL every switch
interval, stalls for at most a few milliseconds at a time however many such bodies arrive together.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
WORKERS = 1


@functools.lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(WORKERS, thread_name_prefix="parse")


async def off_loop(fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` in the parse lane."""
    return await asyncio.get_running_loop().run_in_executor(_pool(), fn, *args)
