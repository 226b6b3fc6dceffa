"""The process executor (the default): each host a process on this machine. :mod:`.executor`,
:mod:`.spawn` (exec-ed hosts), :mod:`.forked` (hosts forked from a warm parent).
"""
