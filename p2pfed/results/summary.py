"""summary.json: the headline numbers of one run, the same for simulated and real peers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from p2pfed.algorithms.attacks import Attack
from p2pfed.algorithms.registry import method_label
from p2pfed.plugins import loaded_code
from p2pfed.results.attack_success import attack_success
from p2pfed.results.provenance import code_version
from p2pfed.results.recorder import GENERALIZATION_COLUMNS, PROTOCOLS, Recorder, protocol_columns, round_float

FINAL_COLUMNS = ("f1_macro_mean", "f1_macro_std", "loss_mean", "accuracy_mean", "f1_present_mean")
PROTOCOL_COLUMNS = tuple(c for p in PROTOCOLS for c in protocol_columns(p))


def build_summary(config: dict[str, Any], source: str, recorder: Recorder, stats: list[dict[str, Any]], *,
                  devices: int, sim_time_s: float, wall_time_s: float, full_model_bytes: int,
                  rounds: float | None = None, **extra: Any) -> dict[str, Any]:
    """``config``: the fully resolved scenario; ``source``: the file it came from; ``stats``: each
    device's method statistics; ``rounds``: rounds per device if not the scenario's
    (asynchronous runs count trainings)."""
    rounds = config["rounds"] if rounds is None else rounds
    final = recorder.rows[-1] if recorder.rows else {}
    bytes_total = recorder.bytes_sent_total
    per_device_round = bytes_total / max(devices * rounds, 1)
    by_key: dict[str, list] = {}
    for device_stats in stats:
        for key, value in device_stats.items():
            by_key.setdefault(key, []).append(value)
    return {
        "algorithm": method_label(config["algorithm"]["name"]),   # a user's class by its name; its file in "code"
        "scenario": config["name"],
        "scenario_file": source,
        "seed": config["seed"],
        "devices": devices,
        "rounds": rounds if isinstance(rounds, int) else round_float(rounds, 2),
        "wall_time_s": round_float(wall_time_s, 3),
        "sim_time_s": round_float(sim_time_s),
        "final": {**{k: final.get(k) for k in FINAL_COLUMNS},
                  **{k: final[k] for k in (*PROTOCOL_COLUMNS, *GENERALIZATION_COLUMNS) if k in final}},
        "evaluation": _evaluation(config, recorder),
        "comm": {
            # every method's float tensors at this precision, the full model too (a fair yardstick)
            "precision": config.get("engine", {}).get("precision", "float32"),
            "bytes_sent_total": bytes_total,
            "bytes_per_device_per_round": round_float(per_device_round, 1),
            "full_model_bytes": full_model_bytes,
            "bytes_per_device_per_round_vs_full_model": round_float(per_device_round / full_model_bytes, 4),
            "bytes_per_message": round_float(bytes_total / max(recorder.messages_sent, 1), 1),
            "bytes_per_message_vs_full_model": round_float(
                bytes_total / max(recorder.messages_sent, 1) / full_model_bytes, 4),
            "messages_sent": recorder.messages_sent,
            "messages_dropped": recorder.messages_dropped,
            "messages_late": recorder.total("messages_late"),
            # second copies of artifacts already received (real peers after a restart), not drops
            "messages_repeated": recorder.total("messages_repeated"),
            "drop_reasons": dict(recorder.drop_reasons),
            "transfers_started": recorder.total("transfers_started"),
            "transfers_completed": recorder.total("transfers_completed"),
            "transfers_aborted": recorder.total("transfers_aborted"),
            "bytes_wasted": recorder.total("bytes_wasted"),
            # sender's sent_at to the receiver's intake, messages not carried by others (delays.py)
            "delivery_time_s": recorder.delivery_times.summary(),
            # the same less each sender-receiver pair's first message (a real connection's setup)
            "delivery_time_after_first_s": recorder.delivery_times_after_first.summary(),
            "delivery_ratio": round_float(recorder.total("messages_received")
                                          / max(recorder.total("transfers_started"), 1), 4),
        },
        "algorithm_stats": {k: _mean_of(v) for k, v in by_key.items()},
        **extra,
        "code": _code(config),
        "config": config,
    }


def adversaries_summary(recorder: Recorder, attacks: Mapping[int, Attack],
                        views: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """``summary.json`` ``adversaries``: who lied and how, the final macro-F1 of the honest
    devices apart from the adversaries' (each protocol scored; means over devices), since an
    attack is judged by what it does to the honest, and the attack's success from the devices'
    end-of-run views (``attack_success``)."""
    def mean_f1(evaluations: list[Any], honest: bool) -> float | None:
        values = [e.f1_macro for d, e in zip(recorder.device_ids, evaluations)
                  if (d not in attacks) == honest and e.f1_macro == e.f1_macro]
        return round_float(sum(values) / len(values)) if values else None

    out: dict[str, Any] = {"devices": {str(d): a.kind for d, a in sorted(attacks.items())},
                           "honest_devices": sum(d not in attacks for d in recorder.device_ids)}
    for label, evaluations in [("", recorder.last_evaluations),
                               *[(f"_{p.replace('-', '_')}", recorder.last_evaluations_under(p)) for p in PROTOCOLS]]:
        if evaluations is not None:
            out[f"honest_f1{label}_mean"] = mean_f1(evaluations, True)
            out[f"adversary_f1{label}_mean"] = mean_f1(evaluations, False)
    return {**out, **attack_success(views, attacks)}


def _evaluation(config: dict[str, Any], recorder: Recorder) -> dict[str, Any]:
    """Which model the headline F1 scored, and the run's best round (some papers report it).

    The round runtimes score each device after its fusion and after its training
    (``final.f1_after_fusion_mean`` / ``f1_after_training_mean``); ``protocol`` names the one in
    ``final.f1_macro_mean``. Over contacts a device is scored at fixed instants with the model it
    holds then, which is the one its latest local training left."""
    contacts = config.get("contacts", {}).get("kind", "none") != "none"
    rows = recorder.rows
    best = max(rows, key=lambda r: r["f1_macro_mean"] if r["f1_macro_mean"] == r["f1_macro_mean"] else -1.0,
               default=None)
    return {"protocol": "at-instant" if contacts else config["evaluation"]["when"],
            **({"best_round": best["round"], "best_f1_macro_mean": best["f1_macro_mean"]} if best else {})}


def _code(config: dict[str, Any]) -> dict[str, Any]:
    """The package's version, and the files (with hashes) of the user's own method and model."""
    user = loaded_code([config["algorithm"]["name"], config.get("model", {}).get("name", "mlp")])
    return {**code_version(), **({"user_code": user} if user else {})}


def _mean_of(values: list) -> Any:
    """Average per-device stats: numbers directly, dicts key by key."""
    if all(isinstance(v, (int, float)) for v in values):
        return round_float(sum(values) / len(values), 4)
    if all(isinstance(v, dict) for v in values):
        keys = sorted({k for v in values for k in v}, key=str)
        return {str(k): _mean_of([v[k] for v in values if k in v]) for k in keys}
    return values
