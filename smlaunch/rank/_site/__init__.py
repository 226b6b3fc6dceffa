"""Holds the ``sitecustomize`` that every rank imports at start (see :mod:`smlaunch.rank.boot`).

This directory is put at the front of each rank's ``PYTHONPATH`` by the supervisor; it is a package
only so that installation copies it.
"""
