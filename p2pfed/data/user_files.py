"""A federation from a researcher's own files (``dataset.name: files``).

Two layouts:

* one table (``.csv``, ``.parquet``) or ``.npz`` file holding every sample, with a device
  column, a label column and features (every other column; in an ``.npz``, the 2-D array ``x``);
* a folder of per-device ``.npz`` files, each with ``x`` and the label array; the file name
  (without ``.npz``) names the device, devices are ordered by file name.

With ``partition.kind: natural`` the devices are the data's own (the device column, or the
files); any other kind pools the samples and draws devices as for a central dataset. Labels
are mapped to class ids across all devices together (see ``labels.py``); each device is then
split and scaled on its own like the packaged datasets.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .dataset import FederatedDataset
from .devices import devices_from_parts, unsplittable
from .errors import DataError
from .labels import encode_labels, label_problems, owner_keys, owner_problems, show
from .partition import PartitionError, PartitionSpec, partition, partition_natural, partition_rng
from .tables import RawTable, read_npz, read_table


def read_files(path: Path, label_column: str, device_column: str | None) -> list[RawTable]:
    """The file's table, or one table per ``.npz`` file of a folder (sorted by name)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".npz" and p.is_file())
        if not files:
            raise DataError([f"{path}: folder holds no .npz files (one per device, with arrays "
                             f"'x' and {label_column!r})"])
        tables = []
        problems = []
        for f in files:
            try:
                tables.append(read_npz(f, label_column, None))
            except DataError as exc:
                problems += exc.problems
        if problems:
            raise DataError(problems)
        widths = {t.x.shape[1] for t in tables}
        if len(widths) > 1:
            first = tables[0]
            raise DataError([f"{t.source}: array 'x': {t.x.shape[1]} features, but {first.source.name} "
                             f"has {first.x.shape[1]}" for t in tables if t.x.shape[1] != first.x.shape[1]])
        return tables
    if not path.exists():
        raise DataError([f"{path}: file not found"])
    return [read_table(path, label_column, device_column)]


def load_files(path: str | Path, *, device_column: str = "device", label_column: str = "label",
               class_names: Sequence[str] | None = None,
               partition_spec: PartitionSpec = PartitionSpec(), test_fraction: float = 0.2,
               seed: int = 0, scaling: str = "device", train_fraction: float = 1.0) -> FederatedDataset:
    """Read, check and split a user's data into devices (see the module docstring)."""
    path = Path(path)
    natural = partition_spec.kind == "natural"
    folder = path.is_dir()
    tables = read_files(path, label_column, device_column if natural and not folder else None)
    problems = [p for t in tables for p in t.problems + label_problems(t, label_column, class_names)]
    if natural and not folder:
        problems += owner_problems(tables[0], device_column)
    if problems:
        raise DataError(problems)
    ids, names = encode_labels([t.labels for t in tables], class_names)
    if len(names) < 2:
        raise DataError([f"{path}: column {label_column!r}: a single class ({names[0]!r}); "
                         f"classification needs at least two"])
    x = np.concatenate([t.x for t in tables])
    y = np.concatenate(ids)
    if natural and folder:
        device_names = [t.source.stem for t in tables]
        bounds = np.cumsum([len(t) for t in tables])
        parts = [np.arange(a, b) for a, b in zip(np.concatenate([[0], bounds[:-1]]), bounds)]
    elif natural:
        assert tables[0].owners is not None   # read with the device column
        keys, parts = partition_natural(owner_keys(tables[0].owners))
        device_names = [show(k) for k in keys]
    else:
        parts = partition(y, partition_spec, partition_rng(seed))
        device_names = [f"device-{i}" for i in range(len(parts))]
    devices = devices_from_parts(x, y, parts, device_names, test_fraction=test_fraction,
                                 seed=seed, scaling=scaling, train_fraction=train_fraction)
    problems = []
    for d in unsplittable(devices):
        if natural and folder:
            where = f"{tables[d.device_id].source}"
        elif natural:
            where = f"{path}: column {device_column!r}"
        else:
            where = f"{path}: dataset.partition"
        problems.append(f"{where}: device {d.name!r} has {d.num_train + d.num_test} sample(s), too "
                        f"few to split into train and test (it needs two samples of one class)")
    if problems:
        raise DataError(problems)
    described = {"kind": "natural", "by": "file" if folder else device_column} if natural \
        else partition_spec.describe()
    return FederatedDataset("files", x.shape[1], len(names), names, devices,
                            partition={**described, "source": str(path)})


__all__ = ["load_files", "read_files", "PartitionError"]
