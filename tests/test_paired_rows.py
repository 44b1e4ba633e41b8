"""The sweep's all-pairs table reads each run's per-device results once, however many
configurations it pairs that run's configuration with."""

from __future__ import annotations

from types import SimpleNamespace

from p2pfed.sweeps.paired import PROTOCOLS, paired_rows


class CountedCell(SimpleNamespace):
    """A finished cell whose devices.csv reads are counted."""

    reads = 0

    def rows(self, file: str) -> list[dict[str, str]]:
        CountedCell.reads += 1
        f1 = self.f1
        return [{"device": str(d), "f1_macro": str(f1 + d / 100), **{f"f1_{p.replace('-', '_')}": str(f1)
                                                                      for p in PROTOCOLS}} for d in range(3)]


def test_each_runs_devices_are_read_once_per_protocol_not_once_per_pair():
    configs, seeds = 8, 3
    cells = [CountedCell(point=SimpleNamespace(seed=s, values=(("training.lr", c),), method="m"),
                         summary={"algorithm": "m", "evaluation": {"protocol": PROTOCOLS[0]},
                                  "comm": {"bytes_per_device_per_round": 10.0 + c}, "config": {}},
                         f1=0.5 + 0.01 * c + 0.003 * s * s)
             for c in range(configs) for s in range(seeds)]
    CountedCell.reads = 0
    rows = paired_rows(cells)
    pairs = configs * (configs - 1) // 2
    assert len(rows) == pairs * len(PROTOCOLS)
    assert CountedCell.reads == len(cells) * len(PROTOCOLS)   # pairs x 2 x seeds reads before
    first = rows[0]
    assert first["n"] == seeds and first["bytes_ratio"] != ""
