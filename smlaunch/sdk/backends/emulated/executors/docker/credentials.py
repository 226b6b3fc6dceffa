"""AWS credentials for containers, without ever writing them into a container's definition.

A container's environment is part of its definition: ``docker inspect`` shows it, and the engine
stores it on disk. So the Docker executor never puts a secret there. What a container gets instead:

- the non-secret AWS configuration of the caller (:data:`CONTAINER_AWS_CONFIGURATION`: region,
  endpoints, retry settings), so boto3 in the container talks to the same S3 (a test's moto server,
  an S3-compatible store) in the same region;
- when the agent has credentials, the container credentials endpoint ECS and SageMaker use: the
  agent serves its credentials over HTTP on ``127.0.0.1`` (containers share the host's network) to
  requests carrying a per-job random token, and the container gets
  ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` and ``AWS_CONTAINER_AUTHORIZATION_TOKEN`` (botocore's
  container credential provider; see botocore's ``credentials.py`` and ``utils.py``
  ``ContainerMetadataFetcher``). boto3 in the job (the runtime fetching ``s3://`` code, a script
  calling AWS) finds credentials as it would on SageMaker, the token is worthless once the job
  ends, and the keys themselves are never in the container's definition, the job directory or a log.

Left out on purpose: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_SECURITY_TOKEN``, the caller's own ``AWS_CONTAINER_*`` and ``AWS_WEB_IDENTITY_TOKEN_FILE``
(secrets), and ``AWS_PROFILE``, ``AWS_CONFIG_FILE``, ``AWS_SHARED_CREDENTIALS_FILE``, ``AWS_CA_BUNDLE``
(paths on this machine, meaningless in a container).
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONTAINER_AWS_CONFIGURATION = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_MAX_ATTEMPTS",
    "AWS_RETRY_MODE",
    "AWS_USE_FIPS_ENDPOINT",
    "AWS_USE_DUALSTACK_ENDPOINT",
    "AWS_STS_REGIONAL_ENDPOINTS",
    "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT",
)
"""The caller's AWS variables a container inherits, besides ``AWS_ENDPOINT_URL`` and
``AWS_ENDPOINT_URL_<SERVICE>``; none of them is a secret."""
FULL_URI_ENV = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
TOKEN_ENV = "AWS_CONTAINER_AUTHORIZATION_TOKEN"
LEASE = timedelta(minutes=15)
"""How long a container's boto3 keeps one answer before it asks again (and gets refreshed ones)."""


def container_aws_configuration(environ: Mapping[str, str]) -> dict[str, str]:
    """The non-secret AWS configuration of ``environ`` that a container inherits."""

    def wanted(key: str) -> bool:
        endpoint = key == "AWS_ENDPOINT_URL" or key.startswith("AWS_ENDPOINT_URL_")
        return endpoint or key in CONTAINER_AWS_CONFIGURATION

    return {key: value for key, value in environ.items() if wanted(key)}


def session_credentials() -> Any | None:
    """The agent's own AWS credentials (boto3's default chain), frozen; None when it has none."""
    import boto3

    credentials = boto3.Session().get_credentials()
    return None if credentials is None else credentials.get_frozen_credentials()


class CredentialServer:
    """Serves ``credentials()`` on ``127.0.0.1`` to requests with the right token (module docstring).

    ``start()`` returns the variables a container needs to use it (``{}`` when there are no
    credentials to serve); ``stop()`` ends it. One server per job, started by the agent.
    """

    def __init__(self, credentials: Callable[[], Any | None] = session_credentials) -> None:
        self._credentials = credentials
        self._token = secrets.token_urlsafe(32)
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> dict[str, str]:
        if self._credentials() is None:
            return {}
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="credentials", daemon=True).start()
        self._server = server
        port = server.server_address[1]
        return {FULL_URI_ENV: f"http://127.0.0.1:{port}/credentials", TOKEN_ENV: self._token}

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _answer(self, authorization: str | None) -> tuple[int, dict[str, str]]:
        if authorization is None or not hmac.compare_digest(authorization, self._token):
            return 403, {"Code": "AccessDenied", "Message": "unknown authorization token"}
        frozen = self._credentials()
        if frozen is None:
            return 404, {"Code": "NoCredentials", "Message": "the agent has no AWS credentials"}
        expiration = (datetime.now(timezone.utc) + LEASE).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "AccessKeyId": frozen.access_key,
            "SecretAccessKey": frozen.secret_key,
            "Expiration": expiration,
        }
        if frozen.token:
            body["Token"] = frozen.token
        return 200, body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        answer = self._answer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = answer(self.headers.get("Authorization"))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None  # nothing about credentials goes to a log

        return Handler
