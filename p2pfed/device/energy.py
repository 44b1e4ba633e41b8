"""Each device's energy account: how long each training step takes on its device, what its
arithmetic and its radio cost, and whether its battery still holds (so whether it may still act).

Compute is charged per step from the work the step actually did (``DeviceLoop.work_flops``: the
FLOPs of its training job and of any training its method ran inside ``train``, and of its
fusion, ``FusionJob.flops``, which includes the work the method spent making the job, e.g.
FedSub's clustering): it takes ``flops / flops_per_s`` simulated seconds and costs
``flops * joules_per_flop``. Communication is never counted here: a device's radio energy is
read, whenever it is needed, from the bytes the Recorder counted for it,

    send_j_per_byte * (bytes_sent + bytes_wasted) + receive_j_per_byte * bytes_received
    + tail_w * (tail time) + idle_w * seconds powered so far,

so it is exactly the transport's byte count times the radio's figures, plus the radio's tail
after its transfers (``radio_busy``: up to ``tail_s`` after each busy spell, cut short by the
next) and its idle listening over the simulated time the device has had energy (the runtime's
clock, ``clock``). A battery is checked before each step and before each transfer (a device
that has nothing left stops there; its last step or message may take it below zero, by at most
that step or message), and recharges refill every battery on their schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from p2pfed.energy import EnergyPlan
from p2pfed.results.recorder import Recorder, round_float


def _sig(x: float) -> float:
    """Ten significant digits: joules and seconds span many orders of magnitude."""
    return float(f"{x:.10g}")

ROUND_COLUMNS = ("energy_compute_j", "energy_comm_j", "energy_j")
DEVICE_COLUMNS = ("profile", "flops", "fusion_flops", "compute_s", "energy_compute_j", "energy_comm_j", "energy_j",
                  "battery_j", "battery_left_j", "depleted_at_s", "depletions")


class EnergyMeter:
    """Per-device compute, energy and battery state; a runtime drives it, the Recorder counts bytes."""

    def __init__(self, plan: EnergyPlan, recorder: Recorder) -> None:
        n = plan.num_devices
        self.plan = plan
        self.recorder = recorder
        self.flops = [0.0] * n
        self.fusion_flops = [0.0] * n          # the part of flops spent fusing (and clustering)
        self.busy_until: list[float | None] = [None] * n   # the end of the radio's latest busy spell
        self.tail_j = [0.0] * n                # tails charged before the latest busy spell
        self.compute_s = [0.0] * n
        self.compute_j = [0.0] * n
        self.steps = [0] * n
        self.used_at_charge = [0.0] * n        # energy used when the battery was last full
        self.powered = [True] * n              # False: battery empty, until a recharge
        self.depleted_at: list[float | None] = [None] * n   # the latest time it ran out
        self.depletions = [0] * n
        self.depleted_s = [0.0] * n            # time spent stopped, up to the latest recharge
        self.recharges = 0
        self.next_recharge = plan.first_recharge_s()
        self.snapshots: dict[int, list[float]] = {}   # round / interval -> cumulative (compute, comm) J
        self.clock: Callable[[], float] = lambda: 0.0   # the runtime's simulated time (it sets this)

    @property
    def has_batteries(self) -> bool:
        return self.plan.has_batteries

    # -- compute -------------------------------------------------------------------------------
    def charge_step(self, i: int, flops: float, fusion_flops: float = 0.0) -> float:
        """Device ``i`` did a step of ``flops`` (``fusion_flops`` of them fusing): charge it;
        returns its simulated duration (s)."""
        self.steps[i] += 1
        return self.charge_work(i, flops, fusion_flops)

    def charge_work(self, i: int, flops: float, fusion_flops: float = 0.0) -> float:
        """``charge_step`` without counting a step (a device that fused but took no part)."""
        profile = None if self.plan.profiles is None else self.plan.profiles[i]
        if profile is None:
            return 0.0
        seconds = flops / profile.flops_per_s
        self.flops[i] += flops
        self.fusion_flops[i] += fusion_flops
        self.compute_s[i] += seconds
        self.compute_j[i] += flops * profile.joules_per_flop
        return seconds

    # -- radio, from the Recorder's counts --------------------------------------------------------
    def comm_j(self, i: int) -> float:
        radio = self.plan.radio
        if radio is None:
            return 0.0
        c = self.recorder.devices[i]   # by position: the meter's devices are the Recorder's
        return (radio.send_j_per_byte * (c.bytes_sent + c.bytes_wasted) + radio.receive_j_per_byte * c.bytes_received
                + self.tail_so_far(i) + self.idle_j(i))

    def radio_busy(self, i: int, start: float, end: float) -> None:
        """Device ``i``'s radio sends or receives from ``start`` to ``end`` (simulated s): the tail
        of its previous busy spell ends here (cut short if this one starts within ``tail_s``)."""
        radio = self.plan.radio
        if radio is None or not radio.tail_w:
            return
        last = self.busy_until[i]
        if last is not None and start > last:
            self.tail_j[i] += radio.tail_w * min(start - last, radio.tail_s)
        self.busy_until[i] = end if last is None else max(last, end)

    def tail_so_far(self, i: int) -> float:
        """The radio's tails up to now: those cut by a later spell, and the latest one's part so far."""
        radio, last = self.plan.radio, self.busy_until[i]
        if radio is None or last is None:
            return 0.0
        return self.tail_j[i] + radio.tail_w * min(max(self.clock() - last, 0.0), radio.tail_s)

    def idle_j(self, i: int) -> float:
        """The radio's idle listening so far: ``idle_w`` over the time device ``i`` had energy."""
        radio = self.plan.radio
        if radio is None or not radio.idle_w:
            return 0.0
        now = self.clock()
        return radio.idle_w * max(now - self._stopped_s(i, now), 0.0)

    def used_j(self, i: int) -> float:
        return self.compute_j[i] + self.comm_j(i)

    # -- batteries ------------------------------------------------------------------------------
    def left_j(self, i: int) -> float | None:
        """Energy left in device ``i``'s battery now (J, may be below zero by its last step or
        message); None without a battery."""
        capacity = self.plan.batteries[i]
        return None if capacity is None else capacity - (self.used_j(i) - self.used_at_charge[i])

    def check(self, i: int, now: float) -> bool:
        """Whether device ``i`` may act now; the first time its battery is found empty it stops
        (until a recharge) and the time is recorded."""
        if not self.powered[i]:
            return False
        left = self.left_j(i)
        if left is not None and left <= 0.0:
            self.powered[i] = False
            self.depleted_at[i] = now
            self.depletions[i] += 1
            return False
        return True

    def recharge_due(self, now: float) -> list[int]:
        """Apply every recharge due by ``now``: every battery full again; returns the devices that
        were stopped and run again."""
        revived: list[int] = []
        while self.next_recharge is not None and self.next_recharge <= now:
            self.recharges += 1
            for i in range(self.plan.num_devices):
                self.used_at_charge[i] = self.used_j(i)
                if not self.powered[i]:
                    self.powered[i] = True
                    self.depleted_s[i] += self.next_recharge - (self.depleted_at[i] or 0.0)
                    revived.append(i)
            every = self.plan.recharge_every_s
            assert every is not None
            self.next_recharge += every
        return sorted(set(revived))

    # -- reporting ------------------------------------------------------------------------------
    def snapshot(self, index: int) -> None:
        """The cumulative energy of all devices at the end of round (or evaluation interval) ``index``."""
        n = range(self.plan.num_devices)
        self.snapshots[index] = [sum(self.compute_j), sum(self.comm_j(i) for i in n)]

    def round_columns(self, index: int) -> dict[str, float]:
        if index not in self.snapshots:
            return {}
        compute, comm = self.snapshots[index]
        return {"energy_compute_j": _sig(compute), "energy_comm_j": _sig(comm),
                "energy_j": _sig(compute + comm)}

    def device_columns(self, i: int) -> dict[str, Any]:
        profile = None if self.plan.profiles is None else self.plan.profiles[i]
        left = self.left_j(i)
        return {"profile": "" if profile is None else profile.name, "flops": self.flops[i],
                "fusion_flops": self.fusion_flops[i],
                "compute_s": _sig(self.compute_s[i]), "energy_compute_j": _sig(self.compute_j[i]),
                "energy_comm_j": _sig(self.comm_j(i)), "energy_j": _sig(self.used_j(i)),
                "battery_j": "" if self.plan.batteries[i] is None else self.plan.batteries[i],
                "battery_left_j": "" if left is None else _sig(max(left, 0.0)),
                "depleted_at_s": "" if (at := self.depleted_at[i]) is None else _sig(at),
                "depletions": self.depletions[i]}

    def summary(self, sim_time_s: float) -> dict[str, Any]:
        """``summary.json`` ``energy``: totals and per-device means, communication and computation
        apart; with batteries, how many ran out and the share of device time spent stopped."""
        n = self.plan.num_devices
        comm = [self.comm_j(i) for i in range(n)]
        counts: dict[str, int] = {}
        for p in self.plan.profiles or ():
            counts[p.name] = counts.get(p.name, 0) + 1
        steps = sum(self.steps)
        out: dict[str, Any] = {
            "radio": None if self.plan.radio is None else self.plan.radio.describe(),
            "profiles": counts,
            "comm_j_total": _sig(sum(comm)),
            "compute_j_total": _sig(sum(self.compute_j)),
            "total_j": _sig(sum(comm) + sum(self.compute_j)),
            "comm_j_per_device": _sig(sum(comm) / n),
            "compute_j_per_device": _sig(sum(self.compute_j) / n),
            "total_j_per_device": _sig((sum(comm) + sum(self.compute_j)) / n),
            "flops_total": sum(self.flops),
            "fusion_flops_total": sum(self.fusion_flops),
            "compute_s_per_step": _sig(sum(self.compute_s) / steps) if steps else None,
        }
        if self.plan.radio is not None and self.plan.radio.idle_w:
            out["idle_j_per_device"] = _sig(sum(self.idle_j(i) for i in range(n)) / n)   # part of comm
        if self.plan.radio is not None and self.plan.radio.tail_w:
            out["tail_j_per_device"] = _sig(sum(self.tail_so_far(i) for i in range(n)) / n)   # part of comm
        if self.has_batteries:
            out["batteries"] = {"devices": sum(b is not None for b in self.plan.batteries),
                                "devices_depleted": sum(d > 0 for d in self.depletions),
                                "depletions": sum(self.depletions),
                                "powered_at_end": sum(self.powered), "recharges": self.recharges,
                                "depleted_fraction": round_float(self._depleted_time(sim_time_s) / n
                                                                 / max(sim_time_s, 1e-12), 4)}
        return out

    def _stopped_s(self, i: int, now: float) -> float:
        """Time device ``i`` spent with an empty battery up to ``now``."""
        return self.depleted_s[i] + (0.0 if self.powered[i] else now - (self.depleted_at[i] or 0.0))

    def _depleted_time(self, end_s: float) -> float:
        return sum(self._stopped_s(i, end_s) for i in range(self.plan.num_devices))

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"flops": list(self.flops), "fusion_flops": list(self.fusion_flops),
                "busy_until": list(self.busy_until), "tail_j": list(self.tail_j),
                "compute_s": list(self.compute_s), "compute_j": list(self.compute_j),
                "steps": list(self.steps), "used_at_charge": list(self.used_at_charge),
                "powered": list(self.powered), "depleted_at": list(self.depleted_at),
                "depletions": list(self.depletions), "depleted_s": list(self.depleted_s),
                "recharges": self.recharges,
                "next_recharge": self.next_recharge,
                "snapshots": {str(k): list(v) for k, v in sorted(self.snapshots.items())}}

    @staticmethod
    def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
        """One account from several (real peers', each of its own device, in device order): the
        per-device figures side by side, each round's totals summed (a peer that stopped early
        adds nothing to later rounds). Batteries do not exist on real peers."""
        merged: dict[str, Any] = {key: [x for s in states for x in s[key]] for key, value in states[0].items()
                                  if isinstance(value, list)}
        rounds = sorted({int(k) for s in states for k in s["snapshots"]})
        merged["snapshots"] = {str(r): [sum(s["snapshots"][str(r)][j] for s in states if str(r) in s["snapshots"])
                                        for j in range(2)] for r in rounds}
        return {**merged, "recharges": 0, "next_recharge": None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.flops = [float(x) for x in state["flops"]]
        self.fusion_flops = [float(x) for x in state["fusion_flops"]]
        self.busy_until = [None if x is None else float(x) for x in state["busy_until"]]
        self.tail_j = [float(x) for x in state["tail_j"]]
        self.compute_s = [float(x) for x in state["compute_s"]]
        self.compute_j = [float(x) for x in state["compute_j"]]
        self.steps = [int(x) for x in state["steps"]]
        self.used_at_charge = [float(x) for x in state["used_at_charge"]]
        self.powered = [bool(x) for x in state["powered"]]
        self.depleted_at = [None if x is None else float(x) for x in state["depleted_at"]]
        self.depletions = [int(x) for x in state["depletions"]]
        self.depleted_s = [float(x) for x in state["depleted_s"]]
        self.recharges = int(state["recharges"])
        self.next_recharge = None if state["next_recharge"] is None else float(state["next_recharge"])
        self.snapshots = {int(k): [float(x) for x in v] for k, v in state["snapshots"].items()}
