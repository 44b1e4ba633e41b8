"""YAML text to Python data, through libyaml's parser where PyYAML was built with it.

Why: a sweep resolves every cell's scenario from its file and ``--set`` texts, thousands of
parses for a large sweep, and PyYAML's pure-Python parser was most of that time. The C parser
gives the same data (the resolvers that type the scalars are the same Python code); PyYAML's
``safe_load`` stays the reference a test compares against.
"""

from __future__ import annotations

from typing import Any

import yaml

SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, parsed by libyaml when available; raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 - a safe loader
