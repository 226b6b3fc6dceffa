"""smlaunch rank bootstrap, imported by Python at start-up because its directory is on PYTHONPATH.

Registers the rank with its supervisor (stack dumps on SIGUSR1, fault injection), then runs the
``sitecustomize`` this one shadows, if there is one further down ``sys.path``. Never raises: a
failure here must not keep the user's script from starting.
"""


def _smlaunch_boot() -> None:
    import importlib.machinery
    import importlib.util
    import os
    import sys

    try:
        from smlaunch.rank import boot

        boot.boot()
    except Exception as error:
        print(f"smlaunch: rank bootstrap failed: {error!r}", file=sys.stderr)
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin != __file__:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_smlaunch_boot()
