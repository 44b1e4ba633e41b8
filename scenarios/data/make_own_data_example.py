"""Regenerate ``own-data-example.csv``: the synthetic generator's data written as a user's table.

    python scenarios/data/make_own_data_example.py

One row per sample: a ``device`` column (a phone name), a ``label`` column (a class name) and
twelve numeric feature columns ``f0``..``f11``, rows grouped by device.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from p2pfed.data import make_synthetic

OUT = Path(__file__).with_name("own-data-example.csv")
CLASS_NAMES = ["alpha", "beta", "gamma", "delta"]


def main() -> None:
    data = make_synthetic(num_devices=8, num_classes=4, num_features=12, groups_per_class=2,
                          samples_per_class=15, classes_per_device=3, noise=1.5, seed=11)
    with OUT.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["device", "label"] + [f"f{j}" for j in range(data.num_features)])
        for dev in data.devices:
            x = np.concatenate([dev.x_train, dev.x_test])
            y = np.concatenate([dev.y_train, dev.y_test])
            for row, label in zip(x, y):
                out.writerow([f"phone-{dev.device_id}", CLASS_NAMES[label]] + [f"{v:.3f}" for v in row])
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
