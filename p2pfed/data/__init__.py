"""Datasets for p2pfed: WISDM (one device per user) and a synthetic federation
with planted per-class device groups."""
from __future__ import annotations

from typing import Any, Callable

from .dataset import DeviceData, FederatedDataset
from .synthetic import make_synthetic
from .wisdm import load_wisdm, load_wisdm_raw

__all__ = ["DeviceData", "FederatedDataset", "load_wisdm", "load_wisdm_raw",
           "make_synthetic", "load_dataset", "DATASETS"]


def _load_wisdm_raw(**options: Any) -> FederatedDataset:
    if "path" not in options:
        raise ValueError("dataset 'wisdm-raw' needs a path= option to the raw WISDM file")
    return load_wisdm_raw(options.pop("path"), **options)


DATASETS: dict[str, Callable[..., FederatedDataset]] = {
    "wisdm": load_wisdm,
    "wisdm-raw": _load_wisdm_raw,
    "synthetic": make_synthetic,
}


def load_dataset(name: str, **options: Any) -> FederatedDataset:
    """Build a dataset by name with loader-specific keyword options."""
    try:
        loader = DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; valid: {sorted(DATASETS)}") from None
    return loader(**options)
