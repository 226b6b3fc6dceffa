"""Supervising a host's ranks: :mod:`.supervisor` (spawn, first failure wins), :mod:`.hooks`,
:mod:`.watchdog`, :mod:`.stacks`, :mod:`.fault_injector`, :mod:`.containment`. See
``docs/failure-policy.md``.
"""
