"""The ``smlaunch`` command: :mod:`.main` (the parser), :mod:`.run` (``run``/``plan``),
:mod:`.jobs` (the job commands), :mod:`.output` (tables, JSON, ``--query``).
"""
