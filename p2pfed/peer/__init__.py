"""Real peers: one device per process over tcp ZeroMQ, running the simulator's algorithms.

``config`` (the peer file), ``keys`` (CURVE), ``data`` (a peer's own CSV/NPZ), ``runtime``
(the loop), ``contacts`` (the loop over contacts), ``entry`` (``p2pfed peer``: picks one of
them and runs it), ``checkpoint`` (atomic per-round state), ``results`` (merging into the
simulator's files) and ``launcher`` (N local peers from a scenario).
"""
