"""botocore's JSON 1.1 protocol as the service speaks it: error bodies and output encoding.

An error is ``{"__type": "<Code>", "message": "..."}`` with its HTTP status (botocore reads the code
after any ``#``); an output is the operation's output shape, members not in the shape left out and
timestamps as seconds since the epoch, so an unmodified client parses exactly what it would parse
from the service.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.model import ListShape, MapShape, Shape, StructureShape

CONTENT_TYPE = "application/x-amz-json-1.1"


class ServiceError(Exception):
    """A refusal in the service's error shape: ``code`` (``ValidationException``), ``message`` and
    the HTTP ``status``."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status

    def body(self) -> dict[str, str]:
        """The JSON body the service answers with."""
        return {"__type": self.code, "message": self.message}


def validation_error(message: str) -> ServiceError:
    """``ValidationException`` (400), the service's answer to a request it refuses as invalid."""
    return ServiceError("ValidationException", message)


def encode(shape: Shape | None, value: Any) -> Any:
    """``value`` as the service serializes ``shape``: members the shape lacks are left out, a
    timestamp becomes seconds since the epoch (a float), None members are dropped."""
    if shape is None:
        return value
    if isinstance(shape, StructureShape):
        if not isinstance(value, dict):
            return value
        return {
            name: encode(shape.members[name], item)
            for name, item in value.items()
            if name in shape.members and item is not None
        }
    if isinstance(shape, ListShape):
        return [encode(shape.member, item) for item in value]
    if isinstance(shape, MapShape):
        return {key: encode(shape.value, item) for key, item in value.items()}
    if shape.type_name == "timestamp" and isinstance(value, datetime):
        return value.timestamp()
    return value


# --- smithy-rpc-v2-cbor: botocore's protocol for CloudWatch -------------------------------------

CBOR_CONTENT_TYPE = "application/cbor"


def decode_cbor(body: bytes) -> Any:
    """A CBOR request body as Python values (timestamps as datetimes), read with botocore's own
    CBOR reader; ``SerializationException`` when it is not CBOR."""
    from botocore.parsers import RpcV2CBORParser

    if not body:
        return {}
    parser = RpcV2CBORParser()
    stream = parser.get_peekable_stream_from_bytes(body)
    try:
        return parser.parse_data_item(stream)
    except Exception:  # botocore's reader raises several kinds on malformed input
        raise ServiceError("SerializationException", "The request body is not CBOR") from None


def encode_cbor(shape: Shape | None, value: Any) -> bytes:
    """``value`` as the service serializes ``shape`` in CBOR (botocore's own CBOR writer)."""
    from botocore.serialize import RpcV2CBORSerializer

    if shape is None:
        return b""
    data = bytearray()
    RpcV2CBORSerializer()._serialize_data_item(data, encode(shape, value), shape)
    return bytes(data)


def _cbor_head(major: int, length: int) -> bytes:
    if length < 24:
        return bytes([major << 5 | length])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if length < 1 << (8 * size):
            return bytes([major << 5 | info]) + length.to_bytes(size, "big")
    raise ValueError(length)


def cbor_error_body(error: ServiceError) -> bytes:
    """The error's body as a CBOR map of text strings."""
    items = error.body()
    data = bytearray(_cbor_head(5, len(items)))
    for key, text in items.items():
        for part in (key, text):
            raw = part.encode()
            data += _cbor_head(3, len(raw)) + raw
    return bytes(data)
