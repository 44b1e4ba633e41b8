"""Regenerate the packaged WISDM npz from the lab's ARFF file.

Usage: python -m p2pfed.data.build_wisdm ARFF_PATH [--out PATH]
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from .wisdm_arrays import arrays_from_arff

DEFAULT_OUT = Path(__file__).parent / "files" / "wisdm_v1.1_transformed.npz"


def build(arff_path: str | Path, out: str | Path = DEFAULT_OUT) -> Path:
    """Write the compressed npz and return its path."""
    arrays: dict[str, Any] = arrays_from_arff(arff_path)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arff", type=Path, help="WISDM_ar_v1.1_transformed.arff")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    out = build(args.arff, args.out)
    with np.load(out, allow_pickle=False) as npz:
        x = npz["x"]
        print(f"wrote {out} ({out.stat().st_size} bytes): {x.shape[0]} examples, "
              f"{x.shape[1]} features, {len(np.unique(npz['user']))} users, "
              f"{int(np.isnan(x).any(axis=1).sum())} examples with missing values")


if __name__ == "__main__":
    main()
