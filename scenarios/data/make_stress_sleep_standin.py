"""Write a STAND-IN table in the format scenarios/wesad-stress.yaml or dreamt-sleep.yaml reads.

    python scenarios/data/make_stress_sleep_standin.py wesad --out wesad-standin.csv
    python scenarios/data/make_stress_sleep_standin.py dreamt --out dreamt-standin.csv

The numbers are synthetic (Gaussian class means shifted per device), NOT WESAD or DREAMT data:
they only have the shape a user's real table must have, so that a template can be tried end to
end. Every device is named ``standin-NN`` to keep that visible in every result.

One row per sample: ``device`` (the subject), ``label`` (a class name) and the numeric feature
columns. WESAD: 30 features (the papers do not name them; here ``f0``..``f29``) and the labels
baseline, stress, amusement, meditation. DREAMT: the 8 signals the papers list, ``bvp``, ``ibi``,
``eda``, ``temp``, ``hr``, ``acc_x``, ``acc_y``, ``acc_z``, and the labels sleep, wake.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

FORMATS = {
    "wesad": ([f"f{j}" for j in range(30)], ["baseline", "stress", "amusement", "meditation"]),
    "dreamt": (["bvp", "ibi", "eda", "temp", "hr", "acc_x", "acc_y", "acc_z"], ["sleep", "wake"]),
}


def write_standin(kind: str, out: Path, devices: int = 6, rows: int = 40, seed: int = 0) -> Path:
    """Write ``devices`` x ``rows`` synthetic rows of ``kind``'s format to ``out``; return ``out``."""
    features, labels = FORMATS[kind]
    rng = np.random.default_rng(seed)
    class_means = rng.normal(scale=2.0, size=(len(labels), len(features)))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        table = csv.writer(handle)
        table.writerow(["device", "label", *features])
        for d in range(devices):
            shift = rng.normal(scale=1.0, size=len(features))   # each subject's own offset
            for i in range(rows):
                c = i % len(labels)
                x = class_means[c] + shift + rng.normal(size=len(features))
                table.writerow([f"standin-{d:02d}", labels[c], *(f"{v:.4f}" for v in x)])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=sorted(FORMATS))
    parser.add_argument("--out", type=Path, required=True, help="CSV file to write")
    parser.add_argument("--devices", type=int, default=6, help="stand-in subjects (default 6)")
    parser.add_argument("--rows", type=int, default=40, help="rows per subject (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = write_standin(args.kind, args.out, args.devices, args.rows, args.seed)
    print(f"wrote {path} (synthetic stand-in, not {args.kind.upper()} data)")


if __name__ == "__main__":
    main()
