"""FedSub's K rule, by evidence (issue 30, goal 2): per K-rule configuration of one or more sweep
folders, final macro-F1 under both evaluation protocols against the clusters the rule made, and
paired tests between configurations with the seed as the unit.

Each configuration is a FedSub cell's ``k_rule`` and ``min_cluster_size`` (``literal``/``half``
ignore the size); ``local`` cells of the same folders are the reference. Per configuration: the
mean over seeds, with its 95 % t interval, of the final macro-F1 after fusion (the headline) and
after training, of ``k_mean`` (K chosen), ``literal_k_mean`` (the journal's rule on the same
prototypes) and ``cluster_size_mean`` (members of a device's cluster). Pairs: every configuration
against the default (``min-size``, 2) and against local training, under each protocol: per shared
seed the run's mean final F1 over the devices both runs scored is one observation
(``p2pfed.sweeps.paired``), paired t over the seeds, p adjusted by Benjamini-Hochberg over every
comparison of the table. Writes ``table.md`` and ``f1_vs_cluster_size.png`` into OUT:

    python bench/k_rule_study.py OUT SWEEP_DIR [SWEEP_DIR ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from p2pfed.sweeps.aggregate import mean_ci  # noqa: E402
from p2pfed.sweeps.archive import stored_cells  # noqa: E402
from p2pfed.sweeps.paired import adjust, paired_test, seed_means  # noqa: E402

DEFAULT = ("min-size", 2)
PROTOCOLS = {"after fusion": "f1_after_fusion", "after training": "f1_after_training"}
STATS = ("k_mean", "literal_k_mean", "cluster_size_mean")


def config_of(summary: dict) -> tuple[str, int] | str:
    algo = summary["config"]["algorithm"]
    if algo["name"] == "local":
        return "local"
    return (algo["k_rule"], algo["min_cluster_size"] if algo["k_rule"] == "min-size" else 0)


def name(config: tuple[str, int] | str) -> str:
    if isinstance(config, str):
        return config
    rule, size = config
    return f"{rule} (min_cluster_size {size})" if rule == "min-size" else rule


def load(dirs: list[Path]) -> dict[tuple[str, int] | str, dict[int, dict]]:
    """Configuration -> seed -> {"summary", "devices": {protocol column: {device: F1}}}."""
    runs: dict[tuple[str, int] | str, dict[int, dict]] = {}
    for folder in dirs:
        for cell in stored_cells(folder).values():
            summary, rows = cell.summary, cell.rows("devices.csv")
            devices = {column: {int(r["device"]): float(r[column]) for r in rows
                                if r.get(column) not in ("", "nan", None)}
                       for column in PROTOCOLS.values()}
            runs.setdefault(config_of(summary), {})[int(summary["seed"])] = {"summary": summary, "devices": devices}
    return runs


def interval(values: list[float]) -> str:
    """Mean [95 % t interval over seeds] (the sweeps' own ``mean_ci``); the mean alone for one seed."""
    mean, _, low, high = mean_ci(values)
    return f"{mean:.3f}" if len(values) < 2 else f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def compare(runs: dict, a: tuple[str, int] | str, b: tuple[str, int] | str, protocol: str) -> dict | None:
    column = PROTOCOLS[protocol]
    shared = sorted(set(runs[a]) & set(runs[b]))
    pairs = [seed_means(runs[a][s]["devices"][column], runs[b][s]["devices"][column]) for s in shared]
    kept = [(s, p) for s, p in zip(shared, pairs) if p is not None]
    if not kept:
        return None
    xa, xb = [p[0] for _, p in kept], [p[1] for _, p in kept]
    return {"a": name(a), "b": name(b), "protocol": protocol, "seeds": [s for s, _ in kept], **paired_test(xa, xb)}


def table(runs: dict) -> list[str]:
    order = sorted(runs, key=lambda c: (c == "local", str(c)))
    lines = ["| configuration | seeds | F1 after fusion [95 % CI over seeds] | F1 after training | "
             + " | ".join(STATS) + " |", "|---" * (4 + len(STATS)) + "|"]
    for config in order:
        sums = [runs[config][s]["summary"] for s in sorted(runs[config])]
        cells = [interval([s["final"][f"{c}_mean"] for s in sums]) for c in PROTOCOLS.values()]
        st = [interval([s["algorithm_stats"][k] for s in sums]) if k in sums[0]["algorithm_stats"] else "–"
              for k in STATS]
        lines.append(f"| {name(config)} | {sorted(runs[config])} | " + " | ".join(cells + st) + " |")
    rows = []
    for protocol in PROTOCOLS:
        for config in order:
            for other in (DEFAULT, "local"):
                if config not in (DEFAULT, "local") or (config == DEFAULT and other == "local"):
                    if other in runs and config != other and (r := compare(runs, config, other, protocol)):
                        rows.append(r)
    rows = adjust(rows)
    tested = sum(1 for r in rows if r["p_value"] != "")
    lines += ["", f"Paired by seed (unit: the seed; each run's mean final F1 over the devices both runs scored); "
              f"95 % t interval over seeds; p adjusted (Benjamini-Hochberg) over the {tested} tested comparisons; "
              "bold: adjusted p < 0.05. A pair sharing one seed has no test.", "",
              "| A vs B | protocol | seeds | F1 A | F1 B | A−B [95 % CI] | p | p adjusted |", "|---" * 8 + "|"]
    for r in rows:
        if r["p_value"] == "":
            lines.append(f"| {r['a']} vs {r['b']} | {r['protocol']} | {r['seeds']} | {r['f1_a']:.3f} | "
                         f"{r['f1_b']:.3f} | {r['f1_diff']:+.3f} (one seed: no test) | – | – |")
            continue
        bold = "**" if r["p_adjusted"] < 0.05 else ""
        lines.append(f"| {r['a']} vs {r['b']} | {r['protocol']} | {r['seeds']} | {r['f1_a']:.3f} | {r['f1_b']:.3f} | "
                     f"{bold}{r['f1_diff']:+.3f}{bold} [{r['f1_diff_ci_low']:+.3f}, {r['f1_diff_ci_high']:+.3f}] | "
                     f"{r['p_value']:.3g} | "
                     f"{r['p_adjusted']:.3g} |")
    return lines


def plot(runs: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for config in sorted((c for c in runs if c != "local"), key=str):
        sums = [runs[config][s]["summary"] for s in sorted(runs[config])]
        ax.scatter([s["algorithm_stats"]["cluster_size_mean"] for s in sums],
                   [s["final"]["f1_after_fusion_mean"] for s in sums], label=name(config))
    if "local" in runs:
        ax.axhline(np.mean([runs["local"][s]["summary"]["final"]["f1_after_fusion_mean"] for s in runs["local"]]),
                   color="grey", linestyle="--", label="local training (mean)")
    ax.set_xlabel("members of a device's cluster (mean over devices, classes, rounds)")
    ax.set_ylabel("final macro-F1 after fusion (one run)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(out: Path, dirs: list[Path]) -> None:
    runs = load(dirs)
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(table(runs)) + "\n"
    (out / "table.md").write_text(text)
    plot(runs, out / "f1_vs_cluster_size.png")
    print(text)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
