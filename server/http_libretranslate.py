"""Placeholder: filled in by its own change."""

from __future__ import annotations

from aiohttp import web


def routes(doors) -> list[web.RouteDef]:
    return []
