"""Triton's model repository extension over gRPC: ``RepositoryIndex``, ``RepositoryModelLoad`` and
``RepositoryModelUnload``, as tritonclient's ``get_model_repository_index``, ``load_model`` and
``unload_model`` call them. A mixin of the KServe servicer (``server/kserve/grpc_binding.py``), mapping protobuf to
``server/models/control.py`` and nothing else; the servicer supplies the protobuf module (``pb``), the
model control and the request tracker (which counts each call and maps its domain error to a status,
as for every other call). Auth is the interceptor's, as for every call."""

from __future__ import annotations

import types

from server.models.control import ModelControl
from server.telemetry.request_tracker import RequestTracker


def parameters_of(params) -> dict:
    """A ModelRepositoryParameter map as plain values."""
    return {
        key: getattr(p, p.WhichOneof("parameter_choice")) if p.WhichOneof("parameter_choice") else None
        for key, p in params.items()
    }


def index_response(pb: types.ModuleType, control: ModelControl, ready_only: bool):
    entry = pb.RepositoryIndexResponse.ModelIndex
    return pb.RepositoryIndexResponse(
        models=[
            entry(name=e.name, version=e.version, state=e.state, reason=e.reason)
            for e in control.index(ready_only)
        ]
    )


class RepositoryServicer:
    pb: types.ModuleType
    control: ModelControl
    tracker: RequestTracker

    async def RepositoryIndex(self, request, context):
        return index_response(self.pb, self.control, request.ready)

    async def RepositoryModelLoad(self, request, context):
        async with self.tracker.track(request.model_name, "RepositoryModelLoad"):
            await self.control.load(request.model_name, parameters_of(request.parameters))
        return self.pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request, context):
        async with self.tracker.track(request.model_name, "RepositoryModelUnload"):
            await self.control.unload(request.model_name, parameters_of(request.parameters))
        return self.pb.RepositoryModelUnloadResponse()
