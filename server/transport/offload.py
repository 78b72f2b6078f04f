"""One lane for the front end's heavy pure-Python work (parsing big JSON, form and html bodies, planning long texts).

A worker thread keeps such work off the event loop, but not off the GIL: 32 html bodies parsed at once
in 32 threads took the GIL from the loop for 570 ms. So every heavy parse goes through one bounded pool
(``WORKERS`` threads; the rest wait their turn in order), and the loop, with the GIL every switch
interval, stalls for at most a few milliseconds at a time however many such bodies arrive together.
"""

from __future__ import annotations

import asyncio
import contextvars
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
    """``fn(*args)`` in the parse lane, in the caller's context (its context variables: the call's statistics)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(_pool(), call)


async def off_loop_if(long: bool, fn: Callable[[], T]) -> T:
    """``fn()`` in the parse lane where it is ``long``, else here (a hand-off costs more than short work)."""
    return await off_loop(fn) if long else fn()
