"""Artifacts signed by their owners: a receiver accepts an artifact, direct or carried by others,
only with its owner's signature; a forged origin, a changed tensor or a missing signature is
refused and counted; simulated keys are the same every run."""

from __future__ import annotations

import numpy as np
import pytest

from p2pfed.algorithms import Payload
from p2pfed.algorithms.state import received_from_state, received_state
from p2pfed.device import Intake, IntakeRules, encode_share
from p2pfed.device.exchange import Carried, encode_carried
from p2pfed.device.wire import RELAY_KEY
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithm
from p2pfed.scenario.loader import load_scenario
from p2pfed.testing import train_once
from p2pfed.transport import Message, decode, encode
from p2pfed.transport.signing import SIGNATURE_KEY, Signing, signer_from_seed
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
KEYS = Signing.simulated(7, 6)


def _devices():
    loaded = load_scenario(SCENARIO, ["algorithm.name=gossip-avg", "dataset.synthetic.num_devices=6",
                                      "dataset.synthetic.samples_per_class=16", "model.hidden=[16]"])
    algos = [build_algorithm(loaded, loaded.federation, i) for i in range(6)]
    train_once(algos[1], 0)
    return algos


def _intake(algo, device: int, signed: bool = True) -> tuple[Intake, Recorder]:
    recorder = Recorder(6)
    rules = IntakeRules(2**24, num_devices=6, hop_limit=4, keyring=KEYS.keyring if signed else None)
    return Intake(device, algo, recorder, rules), recorder


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_a_signed_artifact_is_accepted_direct_and_as_a_copy_carried_on(precision):
    algos = _devices()
    kind, payload = algos[1].kind(), algos[1].share(0)
    data = encode_share(kind, 1, 0, 5.0, payload, 2**24, precision=precision, signer=KEYS.signers[1])
    carrier, _ = _intake(algos[2], 2)
    item = carrier.take(data, link=1, now=6.0, round=0)
    assert item is not None and item.signed is not None
    # device 2 carries it to device 3, which carries it to device 4: the owner's signature holds on
    for hop, (src, dst) in enumerate([(2, 3), (3, 4)]):
        copy = encode_carried(Carried(item, "whole"), kind, src, 2**24, precision).frame.data
        assert decode(copy).meta[RELAY_KEY] == {"origin": 1, "hops": hop + 2}
        receiver, rec = _intake(algos[dst], dst)
        item = receiver.take(copy, link=src, now=7.0, round=0)
        assert item is not None and item.sender == 1, dict(rec.drop_reasons)
    restored = received_from_state(received_state(item))   # a checkpoint keeps the signed copy whole
    again = encode_carried(Carried(restored, "whole"), kind, 4, 2**24, precision).frame.data
    assert _intake(algos[5], 5)[0].take(again, link=4, now=8.0, round=0) is not None


def test_a_forged_origin_a_changed_tensor_or_no_signature_is_refused_and_counted():
    algos = _devices()
    kind, payload = algos[1].kind(), algos[1].share(0)
    intake, rec = _intake(algos[3], 3)
    # device 0 sends its share "carried" for device 1, signed with its own key (a Sybil)
    forged = Payload({**payload.meta, RELAY_KEY: {"origin": 1, "hops": 2}}, payload.tensors)
    assert intake.take(encode_share(kind, 0, 0, 5.0, forged, 2**24, signer=KEYS.signers[0]),
                       link=0, now=6.0, round=0) is None
    # device 1's own signed share, one weight changed on the way
    msg = decode(encode_share(kind, 1, 0, 5.0, payload, 2**24, signer=KEYS.signers[1]))
    name = next(n for n, a in msg.tensors.items() if a.dtype.kind == "f")
    changed = {**msg.tensors, name: msg.tensors[name] + np.float32(1e-3)}
    assert intake.take(encode(Message(msg.kind, 1, 0, 5.0, dict(msg.meta), changed)), link=1, now=6.0, round=0) is None
    assert intake.take(encode_share(kind, 1, 0, 5.0, payload, 2**24), link=1, now=6.0, round=0) is None
    assert rec.drop_reasons["bad-signature"] == 3 and not algos[3].cache
    # the same forgery where artifacts are not signed: cached as device 1's (the Sybil's way in)
    open_intake, _ = _intake(algos[4], 4, signed=False)
    item = open_intake.take(encode_share(kind, 0, 0, 5.0, forged, 2**24), link=0, now=6.0, round=0)
    assert item is not None and item.sender == 1


def test_simulated_keys_are_the_same_every_run_and_differ_between_devices_and_seeds():
    assert signer_from_seed(7, 2).public_bytes() == KEYS.signers[2].public_bytes()
    keys = {signer_from_seed(s, i).public_bytes() for s in (7, 8) for i in range(6)}
    assert len(keys) == 12
    share = Payload({"n": 1}, {"w": np.ones(3, dtype=np.float32)})
    one = encode_share("gossip/model", 1, 0, 0.0, share, 2**24, signer=KEYS.signers[1])
    assert one == encode_share("gossip/model", 1, 0, 0.0, share, 2**24, signer=signer_from_seed(7, 1))
    assert SIGNATURE_KEY in decode(one).meta
    assert len(one) - len(encode_share("gossip/model", 1, 0, 0.0, share, 2**24)) == len(',"sig":""') + 88


def test_receivers_of_a_frame_encoded_here_check_its_signature_without_hashing_it_again(monkeypatch):
    import p2pfed.transport.signing as signing
    from p2pfed.device.exchange import Frame
    from p2pfed.device.loop import Outgoing
    from p2pfed.device.wire import encode_share_signed

    algos = _devices()
    kind, payload = algos[1].kind(), algos[1].share(0)
    data, signature = encode_share_signed(kind, 1, 0, 5.0, payload, 2**24, signer=KEYS.signers[1])
    frame = Outgoing("whole", 0, 5.0, data, signature=signature).frame()
    hashed = []
    monkeypatch.setattr(signing, "signed_digest", lambda *a: hashed.append(a) or b"\0" * 32)
    receiver, rec = _intake(algos[2], 2)
    item = receiver.take(frame.data, link=1, now=6.0, round=0, decoded=frame.message(2**24), memo=frame.memo)
    assert item is not None and item.signed is not None and hashed == []
    # the same bytes without the sender's digest are hashed here, and a tampered frame is refused
    monkeypatch.undo()
    tampered = decode(data)
    tensors = {n: np.array(a) for n, a in tampered.tensors.items()}
    tensors[next(iter(tensors))].flat[0] += 1
    forged = encode(Message(kind=kind, sender=1, round=0, sent_at=5.0, meta=dict(tampered.meta), tensors=tensors))
    again, rec = _intake(algos[3], 3)
    assert again.take(Frame(forged).data, link=1, now=6.0, round=0) is None
    assert dict(rec.drop_reasons) == {"bad-signature": 1}
