"""Requests checked against botocore's service model, as the service checks them.

The model's shapes and constraints are the spec. botocore's client-side validator
(``botocore.validate.ParamValidator``) checks required members, types and minimums; the service
also enforces each shape's maximum, pattern and enum, which a client never checks (and a client
with ``parameter_validation=False``, or a raw HTTP request, checks nothing at all). This module checks
all of them on the decoded JSON and answers as the service does:

- a value of the wrong JSON type: ``SerializationException`` (the service fails to read it);
- a constraint broken: ``ValidationException``, ``N validation error(s) detected: Value 'x' at
  'resourceConfig.instanceCount' failed to satisfy constraint: Member must ...`` (the member path
  in the service's lower camel case, every error in one message);
- a member the shape does not have is ignored, as the service ignores it.

The result is the request with timestamps as :class:`~datetime.datetime` and unknown members left
out. Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timezone
from typing import Any

from botocore.model import ListShape, MapShape, Shape, StructureShape

from smlaunch.serve.wire import ServiceError

_MAX_REPORTED = 10
"""The service lists at most this many validation errors in one message."""


class _Serialization(Exception):
    """The value cannot be read as its shape's type."""


@functools.lru_cache(maxsize=4096)
def _pattern(pattern: str) -> re.Pattern[str] | None:
    """The model's (Java) pattern compiled for Python's ``re``; None where ``re`` cannot read it
    (then the service's own check is the only one)."""
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error:
        return None


def _member_path(path: str, name: str) -> str:
    member = name[:1].lower() + name[1:]
    return f"{path}.{member}" if path else member


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "[...]" if isinstance(value, list) else "{...}"
    return f"'{value}'"


class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def fail(self, path: str, value: Any, constraint: str) -> None:
        self.errors.append(f"Value {_shown(value)} at '{path}' failed to satisfy constraint: {constraint}")

    def check(self, shape: Shape, value: Any, path: str) -> Any:
        if isinstance(shape, StructureShape):
            return self._structure(shape, value, path)
        if isinstance(shape, ListShape):
            if not isinstance(value, list):
                raise _Serialization(f"Expected list or null at '{path}'")
            self._length(shape, value, path, len(value))
            return [self.check(shape.member, item, f"{path}.{i + 1}.member") for i, item in enumerate(value)]
        if isinstance(shape, MapShape):
            if not isinstance(value, dict):
                raise _Serialization(f"Expected map or null at '{path}'")
            self._length(shape, value, path, len(value))
            return {
                self.check(shape.key, key, f"{path}.key"): self.check(shape.value, item, f"{path}.{key}")
                for key, item in value.items()
            }
        return self._scalar(shape, value, path)

    def _structure(self, shape: StructureShape, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _Serialization(f"Start of structure or map found where not expected at '{path or 'input'}'")
        result: dict[str, Any] = {}
        for name in shape.required_members:
            if value.get(name) is None:
                self.fail(_member_path(path, name), None, "Member must not be null")
        for name, item in value.items():
            if name in shape.members and item is not None:
                result[name] = self.check(shape.members[name], item, _member_path(path, name))
        return result

    def _length(self, shape: Shape, value: Any, path: str, length: int) -> None:
        low, high = shape.metadata.get("min"), shape.metadata.get("max")
        if low is not None and length < low:
            self.fail(path, value, f"Member must have length greater than or equal to {low}")
        if high is not None and length > high:
            self.fail(path, value, f"Member must have length less than or equal to {high}")

    def _scalar(self, shape: Shape, value: Any, path: str) -> Any:
        kind = shape.type_name
        if kind == "string":
            if not isinstance(value, str):
                raise _Serialization(f"Expected string at '{path}'")
            self._length(shape, value, path, len(value))
            pattern = shape.metadata.get("pattern")
            compiled = _pattern(pattern) if pattern else None
            if compiled is not None and compiled.fullmatch(value) is None:
                self.fail(path, value, f"Member must satisfy regular expression pattern: {pattern}")
            enum = shape.metadata.get("enum")
            if enum and value not in enum:
                self.fail(path, value, f"Member must satisfy enum value set: [{', '.join(enum)}]")
            return value
        if kind in ("integer", "long", "float", "double"):
            numeric = (int,) if kind in ("integer", "long") else (int, float)
            if isinstance(value, bool) or not isinstance(value, numeric):
                raise _Serialization(f"Expected {kind} at '{path}'")
            low, high = shape.metadata.get("min"), shape.metadata.get("max")
            if low is not None and value < low:
                self.fail(path, value, f"Member must have value greater than or equal to {low}")
            if high is not None and value > high:
                self.fail(path, value, f"Member must have value less than or equal to {high}")
            return value
        if kind == "boolean":
            if not isinstance(value, bool):
                raise _Serialization(f"Expected boolean at '{path}'")
            return value
        if kind == "timestamp":
            return _timestamp(value, path)
        return value  # blob and anything newer: passed on as sent


def _timestamp(value: Any, path: str) -> datetime:
    if isinstance(value, datetime):  # CBOR's tagged time, decoded
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, bool):
        raise _Serialization(f"Expected timestamp at '{path}'")
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise _Serialization(f"Expected timestamp at '{path}'") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    raise _Serialization(f"Expected timestamp at '{path}'")


def validate(shape: StructureShape | None, params: Any) -> dict[str, Any]:
    """``params`` checked against the operation's input ``shape`` (see the module docstring);
    raises :class:`~smlaunch.serve.wire.ServiceError` as the service would."""
    if shape is None:
        return {}
    checker = _Checker()
    try:
        checked = checker.check(shape, params, "")
    except _Serialization as exc:
        raise ServiceError("SerializationException", str(exc)) from None
    if checker.errors:
        count = len(checker.errors)
        plural = "error" if count == 1 else "errors"
        shown = "; ".join(checker.errors[:_MAX_REPORTED])
        raise ServiceError("ValidationException", f"{count} validation {plural} detected: {shown}")
    assert isinstance(checked, dict)
    return checked
