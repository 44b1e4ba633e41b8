"""Shared data types: one device's local data and the whole federation."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class DeviceData:
    """The local train/test data of one peer; features float32, labels int64."""

    device_id: int  # 0..N-1, position in FederatedDataset.devices
    name: str  # e.g. "wisdm-user-7", "synthetic-3"
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def classes(self) -> np.ndarray:
        """Sorted class ids present in this device's training data."""
        return np.unique(self.y_train)

    def class_counts(self, num_classes: int | None = None) -> np.ndarray:
        """Training examples per class id (length `num_classes`, or max id + 1)."""
        length = num_classes if num_classes is not None else int(self.y_train.max(initial=-1)) + 1
        return np.bincount(self.y_train, minlength=length)

    @property
    def num_train(self) -> int:
        return len(self.y_train)

    @property
    def num_test(self) -> int:
        return len(self.y_test)


@dataclass
class FederatedDataset:
    """All devices of one experiment plus the label space they share."""

    name: str
    num_features: int
    num_classes: int
    class_names: list[str]
    devices: list[DeviceData]
    groups: np.ndarray | None = None  # synthetic only: (devices, classes) latent group, -1 = absent
    partition: dict | None = None  # how devices were made from a central dataset (kind, parameters)

    def class_counts(self, split: str = "all") -> np.ndarray:
        """Examples per (device, class id), int64 of shape (devices, classes); ``split`` is
        ``train``, ``test`` or ``all``. Row i is ``devices[i]``, column c is ``class_names[c]``."""
        if split not in ("train", "test", "all"):
            raise ValueError(f"split must be train, test or all, got {split!r}")
        rows = []
        for dev in self.devices:
            labels = {"train": [dev.y_train], "test": [dev.y_test],
                      "all": [dev.y_train, dev.y_test]}[split]
            rows.append(np.bincount(np.concatenate(labels), minlength=self.num_classes))
        return np.array(rows, dtype=np.int64).reshape(len(self.devices), self.num_classes)

    def describe(self) -> dict:
        """JSON-ready account of the federation for results: class names, the partition that
        made the devices, and each device's train and test examples per class."""
        train, test = self.class_counts("train"), self.class_counts("test")
        return {"name": self.name, "devices": len(self.devices), "features": self.num_features,
                "class_names": list(self.class_names), "partition": self.partition,
                "class_counts": {dev.name: {"train": train[i].tolist(), "test": test[i].tolist()}
                                 for i, dev in enumerate(self.devices)}}

    def summary_table(self) -> str:
        """Per-device, per-class example counts as `train/test`, with totals."""
        header = ["device"] + list(self.class_names) + ["total"]
        rows = []
        total_train = np.zeros(self.num_classes, dtype=np.int64)
        total_test = np.zeros(self.num_classes, dtype=np.int64)
        for dev in self.devices:
            tr = np.bincount(dev.y_train, minlength=self.num_classes)
            te = np.bincount(dev.y_test, minlength=self.num_classes)
            total_train += tr
            total_test += te
            rows.append([dev.name] + [f"{a}/{b}" for a, b in zip(tr, te)]
                        + [f"{tr.sum()}/{te.sum()}"])
        rows.append(["TOTAL"] + [f"{a}/{b}" for a, b in zip(total_train, total_test)]
                    + [f"{total_train.sum()}/{total_test.sum()}"])
        widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
        fmt = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(r, widths)))
        lines = [f"{self.name}: {len(self.devices)} devices, {self.num_features} features, "
                 f"{self.num_classes} classes (counts are train/test)", fmt(header)]
        lines += [fmt(r) for r in rows]
        return "\n".join(lines)
