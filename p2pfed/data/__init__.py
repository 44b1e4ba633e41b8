"""Datasets for p2pfed: WISDM (one device per user), a synthetic federation with planted
per-class device groups, scikit-learn's digits split by a partitioner, and a user's own files."""
from __future__ import annotations

from typing import Any, Callable

from .dataset import DeviceData, FederatedDataset
from .digits import load_digits_federated
from .errors import DataError
from .partition import PartitionError, PartitionSpec, partition_rng
from .synthetic import make_synthetic
from .user_files import load_files
from .wisdm import load_wisdm, load_wisdm_raw

__all__ = ["DeviceData", "FederatedDataset", "load_wisdm", "load_wisdm_raw",
           "make_synthetic", "load_digits_federated", "load_files", "load_dataset", "DATASETS",
           "DataError", "PartitionError", "PartitionSpec", "partition_rng"]


def _load_wisdm_raw(**options: Any) -> FederatedDataset:
    if "path" not in options:
        raise ValueError("dataset 'wisdm-raw' needs a path= option to the raw WISDM file")
    return load_wisdm_raw(options.pop("path"), **options)


def _load_files(**options: Any) -> FederatedDataset:
    if "path" not in options:
        raise ValueError("dataset 'files' needs a path= option to the data file or folder")
    return load_files(options.pop("path"), **options)


DATASETS: dict[str, Callable[..., FederatedDataset]] = {
    "wisdm": load_wisdm,
    "wisdm-raw": _load_wisdm_raw,
    "synthetic": make_synthetic,
    "digits": load_digits_federated,
    "files": _load_files,
}


def load_dataset(name: str, **options: Any) -> FederatedDataset:
    """Build a dataset by name with loader-specific keyword options."""
    try:
        loader = DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; valid: {sorted(DATASETS)}") from None
    return loader(**options)
