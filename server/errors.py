"""Domain errors. Each names the gRPC status it maps to, so the scheduler stays free of gRPC types
and the servicers map errors in one place (``grpc.StatusCode[err.code]``)."""


class ServingError(Exception):
    code = "INTERNAL"


# The HTTP status of each status code (KServe v2 REST and Triton use 400 / 404 / 429 / 503 / 504 alike).
HTTP_STATUS = {
    "OK": 200,
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "CANCELLED": 499,
    "INTERNAL": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


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


class ModelLoadFailed(ServingError):
    """A bundle that does not load, validate or warm up; the message names the file and what is wrong.
    Whatever was serving before goes on serving."""

    code = "FAILED_PRECONDITION"


class ModelControlDisabled(ServingError):
    """Load or unload asked of a server whose --model-control-mode is not explicit."""

    code = "FAILED_PRECONDITION"


class EngineFailure(ServingError):
    code = "INTERNAL"


# Client strings (model names, ids, tensor names) go into status messages, which travel in HTTP/2
# trailers (8 KiB by default): echoing them whole would let one client turn any error into a
# metadata-size failure and fill the log.
ECHO_CHARS = 64
MAX_DETAILS_CHARS = 1024  # the longest status message the server sends


def clip(value: str, limit: int = ECHO_CHARS) -> str:
    """``repr`` of a client string, cut to ``limit`` characters with the full length stated."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def clip_details(details: str) -> str:
    return details if len(details) <= MAX_DETAILS_CHARS else details[:MAX_DETAILS_CHARS] + "... (truncated)"


class PermissionDenied(ServingError):
    """A call this client may not make as it came (a browser's cross-site load or unload)."""

    code = "PERMISSION_DENIED"


class Unauthenticated(ServingError):
    """No valid bearer token (HTTP: no single 'Authorization: Bearer' header, or a LibreTranslate api_key)."""

    code = "UNAUTHENTICATED"
