"""The one exception the client raises for a failed RPC."""

import grpc


class CoalesceError(Exception):
    """A call the server (or the channel) answered with a non-OK status.

    code: the grpc.StatusCode, e.g. grpc.StatusCode.INVALID_ARGUMENT.
    message: the status message; for a malformed request the server names
    the field in it (e.g. "input.shape: ...").
    """

    def __init__(self, code, message, method=None):
        self.code = code
        self.message = message
        self.method = method
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{code.name}: {message}")

    @classmethod
    def from_rpc_error(cls, error, method=None):
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code, details or "", method)
