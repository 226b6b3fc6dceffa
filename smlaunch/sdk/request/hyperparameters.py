"""Hyperparameter encoding as SageMaker SDK v2 sends it, and the CreateTrainingJob limits.

Framework estimators send every value as ``json.dumps(value)`` (``10 -> "10"``, ``3e-5 ->
"3e-05"``, ``"x" -> "\\"x\\""``, ``True -> "true"``, dicts and lists as JSON text), keys as
``str(key)``: exactly ``EstimatorBase._json_encode_hyperparameters``. The SDK's generic
``Estimator`` sends ``str(value)`` instead (``True -> "True"``, ``"x" -> "x"``), and JSON only when it
has a ``source_dir`` (its ``set_hyperparameters``): :func:`encode` does both. The training toolkit
and our runtime ``json.loads`` each value back, keeping a value that is not JSON as the raw string.

``sagemaker_*`` keys the user passes are sent as the SDK sends them: the script-mode keys are
replaced by the estimator's own when it stages code, launcher keys (``sagemaker_mpi_enabled``...)
are the launcher settings when there is no ``distribution=``; :func:`check_launcher_keys` refuses
only a launcher key that contradicts ``distribution=``.

Deliberate differences from the SDK: a value ``json.dumps`` cannot encode fails here, naming the
key, instead of a bare ``TypeError`` at ``fit()``; keys that become the same string (``1`` and
``"1"``) are refused instead of one silently winning; a launcher key that contradicts
``distribution=`` is refused instead of silently replaced or sent beside it; and the
CreateTrainingJob limits (at most 100 entries, key <= 256 characters, value <= 2500 characters) are
checked before anything is staged instead of by the service.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from smlaunch import contract
from smlaunch.contract.hyperparameters import truthy
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.distribution import DISTRIBUTION_KEYS
from smlaunch.sdk.request.naming import HYPERPARAMETER_PATTERN


def encode_value(key: str, value: Any, field: str = "hyperparameters") -> str:
    """``json.dumps(value)``, or :class:`ConfigurationError` naming ``field[key]``."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{field}[{key!r}]",
            value,
            f"not JSON-serialisable ({type(value).__name__}: {exc})",
            "pass a str, int, float, bool, None, or a list/dict of those (e.g. str(value))",
        ) from exc


def encode(
    hyperparameters: Mapping[Any, Any] | None, field: str = "hyperparameters", *, as_str: bool = False
) -> dict[str, str]:
    """Encode every value as SDK v2 does: ``json.dumps`` (framework estimators), or with ``as_str``
    ``str()`` (the generic ``Estimator`` without ``source_dir``). Insertion order is kept (it is
    the wire order)."""
    if hyperparameters is None:
        return {}
    if not isinstance(hyperparameters, Mapping):
        raise ConfigurationError(
            field, hyperparameters, "must be a dict of name -> value", "pass e.g. {'epochs': 10}"
        )
    encoded: dict[str, str] = {}
    originals: dict[str, Any] = {}
    for key, value in hyperparameters.items():
        name = str(key)
        if name in encoded:  # {1: "a", "1": "b"}: the wire has one "1", so one value would vanish
            raise ConfigurationError(
                f"{field} key",
                key,
                f"collides with key {originals[name]!r}: both are sent as {name!r}; one value would be lost",
                "keep one of them (hyperparameter names are sent as strings)",
            )
        originals[name] = key
        encoded[name] = str(value) if as_str else encode_value(name, value, field)
    return encoded


LAUNCHER_KEYS = frozenset({*DISTRIBUTION_KEYS, *contract.DISTRIBUTION_ENABLED_FLAGS})
"""Keys the runtime reads as launcher settings (what ``distribution=`` sends, and the flags)."""


def check_launcher_keys(user: Mapping[str, str], launcher: Mapping[str, str], distribution: Any) -> None:
    """Refuse a launcher key among the user's hyperparameters (``user``, wire form) that contradicts
    ``distribution=`` (``launcher``: the keys it sends, wire form): a different value than the one it
    sends (the SDK would silently replace it), or a launcher it does not start turned on (the SDK
    would send both). Without ``distribution=`` (``launcher`` empty) the user's keys are the
    launcher settings, sent as given, as the SDK sends them."""
    if not launcher:
        return
    for key, raw in user.items():
        if key not in LAUNCHER_KEYS:
            continue
        value, sent = decode_value(raw), launcher.get(key)
        if sent is None:
            if key not in contract.DISTRIBUTION_ENABLED_FLAGS or not truthy(value):
                continue  # a setting of a launcher that is off: the runtime never reads it
            problem = f"turns on a launcher that distribution={distribution!r} does not start"
        else:
            wanted = decode_value(sent)
            if value == wanted or (isinstance(wanted, bool) and truthy(value) == wanted):
                continue
            problem = f"contradicts distribution={distribution!r}, which sends {key}={wanted!r}"
        raise ConfigurationError(
            f"hyperparameters[{key!r}]",
            value,
            problem,
            f"drop {key!r} from hyperparameters: distribution= sets the launcher",
        )


def decode_value(raw: str) -> Any:
    """One wire value as the toolkit reads it: ``json.loads``, else the raw string (the generic
    ``Estimator`` sends ``str()``, and requests from other tools are not always JSON-encoded)."""
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


def decode(encoded: Mapping[str, str]) -> dict[str, Any]:
    """Inverse of :func:`encode`, value by value (:func:`decode_value`)."""
    return {key: decode_value(value) for key, value in encoded.items()}


def check_limits(encoded: Mapping[str, str], field: str = "hyperparameters") -> None:
    """CreateTrainingJob's limits on ``HyperParameters``, applied to the encoded (wire) map."""
    if len(encoded) > contract.MAX_HYPERPARAMETERS:
        raise ConfigurationError(
            field,
            f"<{len(encoded)} entries>",
            f"CreateTrainingJob accepts at most {contract.MAX_HYPERPARAMETERS} hyperparameters "
            "(including the sagemaker_* keys smlaunch adds)",
            "group related values into one dict-valued hyperparameter or read them from a config file",
        )
    for key, value in encoded.items():
        if not key or len(key) > contract.MAX_HYPERPARAMETER_KEY_CHARS:
            raise ConfigurationError(
                f"{field} key",
                key,
                f"key must be 1 to {contract.MAX_HYPERPARAMETER_KEY_CHARS} characters (has {len(key)})",
                "use a shorter hyperparameter name",
            )
        if len(value) > contract.MAX_HYPERPARAMETER_VALUE_CHARS:
            raise ConfigurationError(
                f"{field}[{key!r}]",
                value[:60] + "...",
                f"JSON-encoded value is {len(value)} characters; CreateTrainingJob allows "
                f"{contract.MAX_HYPERPARAMETER_VALUE_CHARS}",
                "put large values in a file in source_dir or an input channel and pass its path",
            )
        for part, text in (("key", key), ("value", value)):
            if not HYPERPARAMETER_PATTERN.fullmatch(text):
                raise ConfigurationError(
                    f"{field} key" if part == "key" else f"{field}[{key!r}]",
                    key if part == "key" else value,
                    f"the {part} sent holds a line break, which CreateTrainingJob refuses in "
                    "hyperparameters (its pattern is one line)",
                    "pass the text without line breaks, or put it in a file and pass its path",
                )
