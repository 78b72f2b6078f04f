"""Domain errors. Each names the gRPC status it maps to, so the scheduler stays free of gRPC types
and the servicers map errors in one place (``grpc.StatusCode[err.code]``)."""


class ServingError(Exception):
    code = "INTERNAL"


class InvalidInput(ServingError):
    code = "INVALID_ARGUMENT"


class ModelNotFound(ServingError):
    code = "NOT_FOUND"


class ModelNotReady(ServingError):
    code = "UNAVAILABLE"


class QueueFull(ServingError):
    code = "RESOURCE_EXHAUSTED"


class DeadlineExceeded(ServingError):
    code = "DEADLINE_EXCEEDED"


class Cancelled(ServingError):
    code = "CANCELLED"


class ShuttingDown(ServingError):
    code = "UNAVAILABLE"


class EngineFailure(ServingError):
    code = "INTERNAL"
