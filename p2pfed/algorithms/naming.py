"""A method's names on the wire: ``name`` and ``message_kind``.

Both travel as a message's kind, so they must match the codec's ``KIND_PATTERN``. A class that
sets no ``name`` gets one from its class name (``default_name``), and a class is checked when it
is resolved (``check_names``), so a bad name is one line at load time instead of a codec error
in the middle of a run.
"""

from __future__ import annotations

import re

from p2pfed.transport.codec import KIND_PATTERN, is_valid_kind

NAMED_ATTRIBUTES = ("name", "message_kind")
_WORD_START = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def default_name(class_name: str) -> str:
    """The name of a method class that sets none: its class name split into lower-case words
    joined by ``-`` (``MyFancyMethod`` → ``my-fancy-method``, ``FedAvgHTTP2`` → ``fed-avg-http2``,
    ``Loss_Weighted`` → ``loss_weighted``)."""
    return _WORD_START.sub("-", class_name).lower()


def check_names(cls: type) -> None:
    """Raise ValueError naming the class attribute whose value cannot name a message."""
    for attribute in NAMED_ATTRIBUTES:
        value = getattr(cls, attribute, None)
        if attribute == "message_kind" and value == "":
            continue   # the default: the method's name
        if not is_valid_kind(value):
            raise ValueError(f"{cls.__qualname__}.{attribute} = {value!r}: a method's {attribute} must be 1 to 64 "
                             f"of a-z 0-9 / _ - ({KIND_PATTERN})")
