"""Triton's statistics extension over both bindings: each served model version's figures since start
(``server/telemetry/model_statistics.py`` says what each one counts), as Triton's JSON (``$stats_model_response``);
the gRPC binding builds its ``ModelStatisticsResponse`` from the same data."""

from __future__ import annotations

from server.errors import InvalidInput
from server.models.registry import ServedModels
from server.telemetry.model_statistics import ModelStatistics


def model_statistics(repo: ServedModels, stats: ModelStatistics, name: str = "", version: str = "") -> dict:
    """Every served version of every model (no name), of one model (no version), or one version; NOT_FOUND or
    UNAVAILABLE (unloaded) as the model's other calls answer."""
    if not name:
        if version:
            raise InvalidInput(f"statistics of version {version!r}: name the model too")
        chosen = [(n, v) for n, versions in sorted(repo.models.items()) for v in sorted(versions, key=int)]
    elif version:
        repo.get(name, version)  # ModelNotFound naming the versions loaded
        chosen = [(name, version)]
    else:
        repo.get(name)
        chosen = [(name, v) for v in sorted(repo.models[name], key=int)]
    return {"model_stats": [stats.of(n, v).to_dict(n, v) for n, v in chosen]}
