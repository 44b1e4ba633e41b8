"""What signing artifacts costs per message: bytes on the wire and CPU to sign and to check.

For a few real shares (gossip-avg's whole model and FedSub's share on the synthetic-small
scenario, a wider model's whole share), encodes each message with and without its owner's
signature and times, per message, the encoding with and without signing and a receiver's check
of the signature (``Keyring.problem``), median of ``--repeats`` runs:

    python bench/signing_cost.py [--repeats 200]

prints one row per share: encoded bytes unsigned, bytes the signature adds, and microseconds to
encode unsigned, to encode signed, and to check. Nothing is written; the figures are this
machine's, on this run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from p2pfed.algorithms import Payload
from p2pfed.device import encode_share, merge_parts
from p2pfed.device.wire import RELAY_KEY
from p2pfed.scenario.build import build_algorithm
from p2pfed.scenario.loader import load_scenario
from p2pfed.testing import train_once
from p2pfed.transport import decode
from p2pfed.transport.signing import SIGNATURE_KEY, Signing

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "synthetic-small.yaml"
CASES = {"gossip-avg, synthetic-small": ["algorithm.name=gossip-avg"],
         "fedsub, synthetic-small": ["algorithm.name=fedsub"],
         "gossip-avg, hidden [512, 512]": ["algorithm.name=gossip-avg", "model.hidden=[512,512]"]}


def _median_us(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    keys = Signing.simulated(0, 2)
    print(f"{'share':32} {'bytes':>9} {'+signed':>8} {'encode us':>10} {'signed us':>10} {'check us':>9}")
    for label, sets in CASES.items():
        loaded = load_scenario(SCENARIO, sets)
        algo = build_algorithm(loaded, loaded.federation, 1)
        train_once(algo, 0)
        shared = algo.share(0)
        payload = merge_parts([shared] if isinstance(shared, Payload) else list(shared))[0]   # as sent whole
        kind = algo.kind()

        def plain() -> bytes:
            return encode_share(kind, 1, 0, 1.0, payload, 2**26)

        def signed() -> bytes:
            return encode_share(kind, 1, 0, 1.0, payload, 2**26, signer=keys.signers[1])
        msg = decode(signed())
        meta = {k: v for k, v in msg.meta.items() if k not in (SIGNATURE_KEY, RELAY_KEY)}

        def check() -> object:
            return keys.keyring.problem(msg.meta[SIGNATURE_KEY], msg.kind, 1, msg.round, msg.sent_at, meta,
                                        msg.tensors)
        assert check() is None
        print(f"{label:32} {len(plain()):9d} {len(signed()) - len(plain()):8d} "
              f"{_median_us(plain, args.repeats):10.1f} {_median_us(signed, args.repeats):10.1f} "
              f"{_median_us(check, args.repeats):9.1f}")


if __name__ == "__main__":
    main()
