"""A minimal kubelet device plugin (API v1beta1) that hands out this machine's ``/dev/fuse``, as
smarter-device-manager does on real clusters, so the dev cluster's pods can mount FUSE without
being privileged (which this sandbox's Docker cannot start). Test-only: the few protobuf messages
it needs are encoded by hand, over grpc's generic handlers (no generated code)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")  # the kubelet's fixed place (1.20)
KUBELET_SOCKET = PLUGIN_DIR / "kubelet.sock"
DEVICES = 8


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _text(number: int, value: str) -> bytes:
    return _bytes(number, value.encode())


def _count(message: bytes, number: int) -> int:
    """How many length-delimited fields ``number`` a message holds (its top level only)."""
    found, at = 0, 0
    while at < len(message):
        key, at = _read_varint(message, at)
        kind = key & 7
        if kind == 0:
            _, at = _read_varint(message, at)
        elif kind == 2:
            length, at = _read_varint(message, at)
            at += length
            found += key >> 3 == number
        else:
            raise ValueError(f"unexpected wire type {kind}")
    return found


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


class FuseDevicePlugin:
    """Serves ``resource`` (:data:`DEVICES` of them, each ``/dev/fuse``) until :meth:`close`."""

    def __init__(self, resource: str) -> None:
        self.resource = resource
        self.socket = PLUGIN_DIR / f"smlaunch-{resource.replace('/', '-')}.sock"
        self._stop = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(lambda request, context: b""),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(self._list_and_watch),
            "Allocate": grpc.unary_unary_rpc_method_handler(self._allocate),
            "PreStartContainer": grpc.unary_unary_rpc_method_handler(lambda request, context: b""),
            "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(lambda request, context: b""),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", handlers),)
        )

    def _list_and_watch(self, request: bytes, context: Any) -> Iterator[bytes]:
        devices = b"".join(_bytes(1, _text(1, f"fuse-{i}") + _text(2, "Healthy")) for i in range(DEVICES))
        yield devices
        while not self._stop.wait(1.0) and context.is_active():
            pass

    def _allocate(self, request: bytes, context: Any) -> bytes:
        device = _text(1, "/dev/fuse") + _text(2, "/dev/fuse") + _text(3, "rwm")
        one = _bytes(3, device)
        return b"".join(_bytes(1, one) for _ in range(max(1, _count(request, 1))))

    def start(self) -> None:
        """Serve on the plugin's socket, then register with the kubelet."""
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()
        register = _text(1, "v1beta1") + _text(2, self.socket.name) + _text(3, self.resource)
        with grpc.insecure_channel(f"unix://{KUBELET_SOCKET}") as channel:
            channel.unary_unary("/v1beta1.Registration/Register")(register, timeout=10)

    def close(self) -> None:
        self._stop.set()
        self._server.stop(grace=1).wait(5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
