"""The socket protocol: typed messages, framing and the error tree."""

from .errors import (
    DaemonUnavailable,
    FrameTooLarge,
    ProtocolError,
    RemoteError,
    SessiondError,
    VersionMismatch,
)
from .framing import DEFAULT_MAX_FRAME, FrameBuffer, decode_request, decode_response, encode
from .messages import DURABILITIES, PROTOCOL_VERSION, Request, Response

__all__ = [
    "DEFAULT_MAX_FRAME",
    "DURABILITIES",
    "PROTOCOL_VERSION",
    "DaemonUnavailable",
    "FrameBuffer",
    "FrameTooLarge",
    "ProtocolError",
    "RemoteError",
    "Request",
    "Response",
    "SessiondError",
    "VersionMismatch",
    "decode_request",
    "decode_response",
    "encode",
]
