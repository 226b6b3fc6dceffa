"""SigV4 authentication against the key pairs the server was started with.

The key pairs come from a file in the AWS shared-credentials format (``[profile]``,
``aws_access_key_id``, ``aws_secret_access_key``), so the same file serves the clients as
``AWS_SHARED_CREDENTIALS_FILE``. Each request's signature is recomputed over the request as
received (its method, path, query, the headers it says it signed and its body) with
``botocore.auth.SigV4Auth`` and compared in constant time. A refusal is the service's:

- no ``Authorization`` header: ``MissingAuthenticationTokenException`` (403);
- an access key the server does not know: ``UnrecognizedClientException`` (400);
- any other signature (wrong secret, altered request, body not the one signed, a clock more than
  15 minutes off): ``InvalidSignatureException`` (400).

A secret never leaves this module: not in an error, not in a log line, not in ``repr``.
"""

from __future__ import annotations

import configparser
import hashlib
import hmac
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.serve.wire import ServiceError

MAX_SKEW = timedelta(minutes=15)
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/"
    r"(?P<service>[^/,\s]+)/aws4_request,\s*SignedHeaders=(?P<headers>[^,\s]+),\s*Signature=(?P<sig>[0-9a-f]{64})$"
)
_SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS "
    "Secret Access Key and signing method. Consult the service documentation for details."
)


@dataclass(frozen=True)
class KeyPairs:
    """Access key id -> secret; the secrets are never shown."""

    secrets: dict[str, str] = field(repr=False)

    def __repr__(self) -> str:
        return f"KeyPairs(access_keys={sorted(self.secrets)})"


def load_key_pairs(path: str | Path) -> KeyPairs:
    """The key pairs of a shared-credentials file; refuses a file others may read, or one without
    any pair, naming the fix."""
    path = Path(path).expanduser()
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(
            "--credentials", str(path), f"cannot be read ({exc.strerror})", "name a readable key-pair file"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigurationError(
            "--credentials",
            str(path),
            "other users may read it: its secrets would not be secret",
            f"chmod 600 {path}",
        )
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error:
        parser.clear()  # its message could quote a secret: the refusal below says only where
    pairs: dict[str, str] = {}
    for section in parser.sections():
        key = parser.get(section, "aws_access_key_id", fallback="").strip()
        secret = parser.get(section, "aws_secret_access_key", fallback="").strip()
        if key and secret:
            pairs[key] = secret
    if not pairs:
        raise ConfigurationError(
            "--credentials",
            str(path),
            "holds no key pair in the shared-credentials format",
            "write [default] with aws_access_key_id = ... and aws_secret_access_key = ... lines",
        )
    return KeyPairs(pairs)


def create_key_pair_file(path: Path) -> KeyPairs:
    """Write a fresh random key pair to ``path`` (mode 0600, as ``[default]``) and return it."""
    key = "AKSL" + secrets.token_hex(8).upper()
    secret = secrets.token_urlsafe(30)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"[default]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
    return KeyPairs({key: secret})


def verify(
    pairs: KeyPairs,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    now: datetime | None = None,
) -> str:
    """Check the request's SigV4 signature; returns the access key id that signed it, or raises
    :class:`~smlaunch.serve.wire.ServiceError` as the service refuses (module docstring).
    ``headers`` are the received headers with lower-case names."""
    authorization = headers.get("authorization")
    if not authorization:
        raise ServiceError("MissingAuthenticationTokenException", "Missing Authentication Token", 403)
    found = _AUTHORIZATION.match(authorization.strip())
    if found is None:
        raise ServiceError(
            "IncompleteSignatureException",
            "Authorization header requires 'Credential', "
            "'SignedHeaders' and 'Signature' parameters of AWS4-HMAC-SHA256.",
        )
    secret = pairs.secrets.get(found["key"])
    if secret is None:
        raise ServiceError(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    amz_date = headers.get("x-amz-date", "")
    try:
        signed_at = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        raise ServiceError(
            "IncompleteSignatureException", f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'."
        ) from None
    now = now or datetime.now(timezone.utc)
    if abs(now - signed_at) > MAX_SKEW:
        raise ServiceError(
            "InvalidSignatureException",
            f"Signature expired: {amz_date} is now earlier than "
            f"{(now - MAX_SKEW).strftime('%Y%m%dT%H%M%SZ')} ({now.strftime('%Y%m%dT%H%M%SZ')} - 15 min.)",
        )
    if found["date"] != amz_date[:8]:
        raise ServiceError("InvalidSignatureException", _SIGNATURE_MISMATCH)
    signed = found["headers"].split(";")
    if "host" not in signed or any(name not in headers for name in signed):
        raise ServiceError("InvalidSignatureException", _SIGNATURE_MISMATCH)
    declared = headers.get("x-amz-content-sha256")
    if (
        declared is not None
        and declared != "UNSIGNED-PAYLOAD"
        and declared != hashlib.sha256(body).hexdigest()
    ):
        raise ServiceError("InvalidSignatureException", _SIGNATURE_MISMATCH)
    request = AWSRequest(
        method=method,
        url=f"http://{headers['host']}{path}",
        headers={name: headers[name] for name in signed},
        data=body,
    )
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(found["key"], secret), found["service"], found["region"])
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, found["sig"]):
        raise ServiceError("InvalidSignatureException", _SIGNATURE_MISMATCH)
    return found["key"]
