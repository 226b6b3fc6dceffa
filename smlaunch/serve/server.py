"""The HTTP server: botocore's JSON 1.1 protocol, routed by ``X-Amz-Target``.

Every request is ``POST /`` with ``X-Amz-Target: SageMaker.<Operation>`` (or
``Logs_20140328.<Operation>`` for CloudWatch Logs) and a JSON body, or, for CloudWatch's metrics,
``POST /service/GraniteServiceVersion20100801/operation/<Operation>`` with a CBOR body
(``smithy-rpc-v2-cbor``, botocore's protocol for CloudWatch), answered in kind. In order: the SigV4 signature
is verified (:mod:`.auth`), the operation looked up (one not implemented is answered as the service
answers an unknown action, ``UnknownOperationException`` naming it), the body checked against the
operation's input shape (:mod:`.validation`), the operation run, and its answer encoded as its
output shape (:mod:`.wire`). The access log says who called what and how it ended, never a header
or a body (they hold signatures and the jobs' settings).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import botocore.session
from botocore.model import OperationModel, ServiceModel

from smlaunch.serve import auth
from smlaunch.serve.logs import LogsService
from smlaunch.serve.metrics import MetricsService
from smlaunch.serve.training import TrainingService
from smlaunch.serve.validation import validate
from smlaunch.serve.wire import (
    CBOR_CONTENT_TYPE,
    CONTENT_TYPE,
    ServiceError,
    cbor_error_body,
    decode_cbor,
    encode,
    encode_cbor,
)

LOG = logging.getLogger("smlaunch.serve")
MAX_BODY_BYTES = 8 << 20
"""Larger bodies are refused unread (CreateTrainingJob's largest members add up to far less)."""
TARGET_PREFIXES = {
    "SageMaker": "sagemaker",
    "Logs_20140328": "logs",
    "GraniteServiceVersion20100801": "cloudwatch",
}
"""``X-Amz-Target``'s prefix (or the CBOR path's service) -> the service whose model describes it."""
CBOR_PATH = re.compile(r"^/service/(?P<service>[A-Za-z0-9_]+)/operation/(?P<operation>[A-Za-z0-9]+)$")

Handler = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Api:
    """The implemented operations and the services' models; :meth:`call` answers one request."""

    key_pairs: auth.KeyPairs
    handlers: dict[tuple[str, str], Handler]
    models: dict[str, ServiceModel]

    @classmethod
    def build(cls, training: TrainingService, logs: LogsService, key_pairs: auth.KeyPairs) -> Api:
        session = botocore.session.get_session()
        models = {name: session.get_service_model(name) for name in ("sagemaker", "logs", "cloudwatch")}
        metrics = MetricsService(training)
        handlers: dict[tuple[str, str], Handler] = {
            ("sagemaker", "CreateTrainingJob"): training.create_training_job,
            ("sagemaker", "DescribeTrainingJob"): training.describe_training_job,
            ("sagemaker", "ListTrainingJobs"): training.list_training_jobs,
            ("sagemaker", "StopTrainingJob"): training.stop_training_job,
            ("sagemaker", "AddTags"): training.add_tags,
            ("sagemaker", "ListTags"): training.list_tags,
            ("sagemaker", "DeleteTags"): training.delete_tags,
            ("logs", "DescribeLogStreams"): logs.describe_log_streams,
            ("logs", "GetLogEvents"): logs.get_log_events,
            ("logs", "FilterLogEvents"): logs.filter_log_events,
            ("cloudwatch", "GetMetricStatistics"): metrics.get_metric_statistics,
            ("cloudwatch", "GetMetricData"): metrics.get_metric_data,
        }
        return cls(key_pairs, handlers, models)

    def operation(self, target: str | None) -> tuple[str, OperationModel, Handler]:
        """The service, model and handler of ``X-Amz-Target``; ``UnknownOperationException`` else."""
        prefix, _, name = (target or "").partition(".")
        service = TARGET_PREFIXES.get(prefix)
        handler = self.handlers.get((service or "", name))
        if service is None or handler is None:
            shown = target or "(no X-Amz-Target header)"
            raise ServiceError(
                "UnknownOperationException",
                f"Unknown operation {shown}: smlaunch serve does not implement it",
            )
        return service, self.models[service].operation_model(name), handler

    def call(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        """The status, body and content type answering one request (``headers`` with lower-case
        names)."""
        cbor = CBOR_PATH.match(path)
        try:
            auth.verify(self.key_pairs, method, path, headers, body)
            if method != "POST":
                raise ServiceError("UnknownOperationException", f"Unknown operation: {method} {path}")
            target = f"{cbor['service']}.{cbor['operation']}" if cbor else headers.get("x-amz-target")
            _, model, handler = self.operation(target)
            if cbor:
                params = decode_cbor(body)
            else:
                try:
                    params = json.loads(body.decode("utf-8")) if body.strip() else {}
                except (UnicodeDecodeError, ValueError, RecursionError):  # not JSON, or a nesting bomb
                    raise ServiceError("SerializationException", "The request body is not JSON") from None
            result = handler(validate(model.input_shape, params))
            if cbor:
                return 200, encode_cbor(model.output_shape, result), CBOR_CONTENT_TYPE
            answer = encode(model.output_shape, result) if model.output_shape is not None else {}
            return 200, json.dumps(answer).encode(), CONTENT_TYPE
        except ServiceError as exc:
            if cbor:
                return exc.status, cbor_error_body(exc), CBOR_CONTENT_TYPE
            return exc.status, json.dumps(exc.body()).encode(), CONTENT_TYPE


def make_handler(api: Api) -> type[BaseHTTPRequestHandler]:
    """The request handler class of a server answering with ``api``."""

    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms wait for an ACK
        server_version = "smlaunch-serve"

        def _answer(self) -> None:
            request_id = str(uuid.uuid4())
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                length = int(headers.get("content-length") or 0)
            except ValueError:
                length = -1
            kind = CONTENT_TYPE
            failure: ServiceError | None = None
            if not 0 <= length <= MAX_BODY_BYTES:
                failure = ServiceError("SerializationException", "Request body too large or unsized", 413)
                self.close_connection = True
            else:
                body = self.rfile.read(length)
                try:
                    status, data, kind = api.call(self.command, self.path, headers, body)
                except Exception:  # a bug of ours: the client gets the service's 500, the log the rest
                    LOG.exception("%s failed", headers.get("x-amz-target", self.path))
                    failure = ServiceError("InternalFailure", "An internal error occurred.", 500)
            if failure is not None:
                status, data, kind = failure.status, json.dumps(failure.body()).encode(), CONTENT_TYPE
            self.send_response(status)
            self.send_header("Content-Type", kind)
            if kind == CBOR_CONTENT_TYPE:
                self.send_header("smithy-protocol", "rpc-v2-cbor")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-amzn-RequestId", request_id)
            self.end_headers()
            self.wfile.write(data)
            code = ""
            if status >= 400 and kind == CONTENT_TYPE:  # the refusal's code, never its message
                code = str(json.loads(data).get("__type", ""))
            LOG.info(
                "%s %s -> %d %s", self.client_address[0], headers.get("x-amz-target", self.path), status, code
            )

        do_POST = _answer
        do_GET = _answer
        do_PUT = _answer
        do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            """Silenced: :meth:`_answer` logs each request its own way (no headers, no body)."""

    return _Handler


class Server(ThreadingHTTPServer):
    """The threaded HTTP server of ``smlaunch serve`` (one thread per connection)."""

    daemon_threads = True
    allow_reuse_address = True


def make_server(host: str, port: int, api: Api) -> Server:
    """A server bound to ``host:port`` (port 0: a free one, ``server.server_address`` says which)."""
    return Server((host, port), make_handler(api))
