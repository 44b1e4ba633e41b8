"""A scenario's ``dataset`` section → the federation: every device's train and test data."""

from __future__ import annotations

from pathlib import Path

from p2pfed.data import DataError, FederatedDataset, PartitionError, PartitionSpec, load_dataset
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.schema import DatasetSection


def load_federation(ds: DatasetSection, *, seed: int, path: Path | None, source: str) -> FederatedDataset:
    """The devices ``ds`` describes, split with ``seed``; ``path``: its file, resolved (None: the
    packaged one). A bad data file or an impossible partition is a ScenarioError (one line per
    problem, naming ``source``'s field and the file's column or the partition key)."""
    common = {"test_fraction": ds.test_fraction, "train_fraction": ds.train_fraction, "seed": seed}
    if ds.name == "synthetic":
        return load_dataset("synthetic", **common, **ds.synthetic.model_dump())
    if ds.name in ("digits", "files"):
        spec = PartitionSpec(**ds.partition.model_dump())
        own = {} if ds.name == "digits" else {
            "path": str(path), "device_column": ds.device_column, "label_column": ds.label_column,
            "class_names": ds.class_names}
        try:
            return load_dataset(ds.name, **common, scaling=ds.scaling, partition_spec=spec, **own)
        except DataError as exc:
            raise ScenarioError([f"{source}: dataset.path: {p}" for p in exc.problems]) from None
        except PartitionError as exc:
            raise ScenarioError([f"{source}: dataset.partition: {exc}"]) from None
    if ds.name == "wisdm":
        return load_dataset("wisdm", **common, scaling=ds.scaling, users=ds.users, features=ds.features,
                            path=None if path is None else str(path))
    return load_dataset("wisdm-raw", **common, scaling=ds.scaling, path=str(path))
