"""Hyperparameters: decoded from the wire, split into user and framework keys, rendered as argv and env.

The CreateTrainingJob API carries string values only; SDK v2 JSON-encodes each one. The runtime reads
them exactly as SageMaker's training toolkit does, so a script sees the same values on SageMaker, in
smlaunch and under the toolkit:

- :func:`decode`: ``json.loads`` each value; a value that is not JSON (``"not json at all"``) is kept
  as the raw string (toolkit ``read_hyperparameters``).
- :func:`split`: ``sagemaker_*`` keys and the reserved keys leave the user's hyperparameters; the
  non-reserved ``sagemaker_*`` keys become the framework params (toolkit ``split_by_criteria``).
- :func:`to_cmd_args`: the toolkit's argv rendering, kept bug-compatible because scripts written for
  SageMaker parse it: keys sorted, ``-k`` for one-character keys, ``True`` for booleans, Python
  ``str()`` for lists, ``k=v,k2=v2`` for dicts, ``""`` for None. The values are argv elements, never
  re-split by a shell (the toolkit's shell bug is not copied).
- :func:`env_value`: the ``SM_*`` value format: strings raw, None ``""``, anything else compact JSON
  with sorted keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from smlaunch import contract


def decode(raw: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-decode every value; keep a value that does not decode as it was."""
    decoded: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            decoded[key] = json.loads(value)
        except (ValueError, TypeError):
            decoded[key] = value
    return decoded


def split(decoded: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Return ``(user, framework, sagemaker)``.

    ``user``: what the script receives (argv, ``SM_HPS``, ``SM_HP_*``). ``sagemaker``: every
    ``sagemaker_*`` or reserved key. ``framework``: the ``sagemaker`` keys that are not reserved
    (``SM_FRAMEWORK_PARAMS``; the launcher flags live here).
    """
    sagemaker = {
        k: v
        for k, v in decoded.items()
        if k in contract.RESERVED_HYPERPARAMETERS or k.startswith(contract.FRAMEWORK_PARAM_PREFIX)
    }
    user = {k: v for k, v in decoded.items() if k not in sagemaker}
    framework = {k: v for k, v in sagemaker.items() if k not in contract.RESERVED_HYPERPARAMETERS}
    return user, framework, sagemaker


def _arg_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("latin1")
    return str(value)


def to_cmd_args(hyperparameters: Mapping[str, Any]) -> list[str]:
    """The script's argv tail, exactly as the toolkit's ``mapping.to_cmd_args`` renders it."""
    args: list[str] = []
    for key in sorted(hyperparameters):
        name = _arg_text(key)
        args.append(("--" if len(name) > 1 else "-") + name if name else "")
        value = hyperparameters[key]
        if isinstance(value, Mapping):
            args.append(",".join(f"{k}={v}" for k, v in sorted(value.items())))
        else:
            args.append(_arg_text(value))
    return args


def env_value(value: Any) -> str:
    """An ``SM_*`` value: str raw, bytes latin1, None ``""``, else compact sorted JSON."""
    if isinstance(value, bytes):
        return value.decode("latin1")
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def truthy(value: Any) -> bool:
    """A launcher flag as the SDK sends it (``true``) or as a raw caller might (``"True"``, ``1``)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)
