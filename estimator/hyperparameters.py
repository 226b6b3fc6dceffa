"""Hyperparameter encoding as SageMaker SDK v2 sends it, and the CreateTrainingJob limits.

Every value goes on the wire as ``json.dumps(value)`` (``10 -> "10"``, ``3e-5 -> "3e-05"``,
``"x" -> "\\"x\\""``, ``True -> "true"``, dicts and lists as JSON text), keys as ``str(key)``:
exactly ``EstimatorBase._json_encode_hyperparameters``. The training toolkit and our runtime
``json.loads`` each value back. Pure functions, no I/O.

Deliberate difference from the SDK: a value ``json.dumps`` cannot encode fails here, naming the
key, instead of a bare ``TypeError`` at ``fit()``; and the CreateTrainingJob limits (at most 100
entries, key <= 256 characters, value <= 2500 characters) are checked before anything is staged
instead of by the service.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from estimator.errors import ConfigurationError
from runtime import contract


def encode_value(key: str, value: Any, field: str = "hyperparameters") -> str:
    """``json.dumps(value)``, or :class:`ConfigurationError` naming ``field[key]``."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{field}[{key!r}]", value, f"not JSON-serialisable ({type(value).__name__}: {exc})",
            "pass a str, int, float, bool, None, or a list/dict of those (e.g. str(value))",
        ) from exc


def encode(hyperparameters: Mapping[Any, Any] | None, field: str = "hyperparameters") -> dict[str, str]:
    """Encode every value as SDK v2 does; insertion order is kept (it is the wire order)."""
    if hyperparameters is None:
        return {}
    if not isinstance(hyperparameters, Mapping):
        raise ConfigurationError(
            field, hyperparameters, "must be a dict of name -> value", "pass e.g. {'epochs': 10}"
        )
    return {str(key): encode_value(str(key), value, field) for key, value in hyperparameters.items()}


def decode(encoded: Mapping[str, str]) -> dict[str, Any]:
    """Inverse of :func:`encode`; a value that is not JSON text is kept as the raw string
    (requests written by other tools, e.g. the console, are not always JSON-encoded)."""
    decoded: dict[str, Any] = {}
    for key, value in encoded.items():
        try:
            decoded[key] = json.loads(value)
        except (TypeError, ValueError):
            decoded[key] = value
    return decoded


def check_limits(encoded: Mapping[str, str], field: str = "hyperparameters") -> None:
    """CreateTrainingJob's limits on ``HyperParameters``, applied to the encoded (wire) map."""
    if len(encoded) > contract.MAX_HYPERPARAMETERS:
        raise ConfigurationError(
            field, f"<{len(encoded)} entries>",
            f"CreateTrainingJob accepts at most {contract.MAX_HYPERPARAMETERS} hyperparameters "
            "(including the sagemaker_* keys smlaunch adds)",
            "group related values into one dict-valued hyperparameter or read them from a config file",
        )
    for key, value in encoded.items():
        if not key or len(key) > contract.MAX_HYPERPARAMETER_KEY_CHARS:
            raise ConfigurationError(
                f"{field} key", key,
                f"key must be 1 to {contract.MAX_HYPERPARAMETER_KEY_CHARS} characters (has {len(key)})",
                "use a shorter hyperparameter name",
            )
        if len(value) > contract.MAX_HYPERPARAMETER_VALUE_CHARS:
            raise ConfigurationError(
                f"{field}[{key!r}]", value[:60] + "...",
                f"JSON-encoded value is {len(value)} characters; CreateTrainingJob allows "
                f"{contract.MAX_HYPERPARAMETER_VALUE_CHARS}",
                "put large values in a file in source_dir or an input channel and pass its path",
            )
