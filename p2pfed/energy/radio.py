"""What a radio spends: one figure per byte sent, one per byte received, an optional tail (the
power a radio keeps drawing after its last transfer before it drops to a low-power state, for up
to ``tail_s`` seconds; a new transfer within the tail cuts it short) and an optional idle power
(listening, charged over the time the device is powered).

Presets, from what each figure's source says (``docs/reference/scenario.md`` lists them too):

- ``wifi``: ns-3's ``WifiRadioEnergyModel`` defaults, TX 0.380 A, RX 0.313 A and idle 0.273 A
  (``src/wifi/model/wifi-radio-energy-model.cc``), at an assumed 3.0 V supply and an assumed
  54 Mbit/s (802.11g) rate; a radio that never sleeps, as ns-3's default state machine (its sleep
  current, 0.033 A, needs a sleep schedule p2pfed does not model).
- ``ble``: Nordic nRF52840 product specification, radio current at 1 Mbps BLE with the DC/DC
  regulator: TX at 0 dBm 6.40 mA, RX 6.26 mA, at an assumed 3.0 V supply and the 1 Mbit/s PHY
  rate (no protocol overhead: a lower bound per byte).
- ``lte``: the LTE power model of AT&T's Application Resource Optimizer (ARO, Apache-2.0,
  github.com/attdevsupport/ARO, class ``com.att.aro.model.ProfileLTE``, its default profile):
  while transferring, ``alpha_up * uplink_Mbps + alpha_down * downlink_Mbps + beta`` with
  alpha_up 438.39 mW/Mbps, alpha_down 51.97 mW/Mbps, beta 1.2 W; after the last packet, 0.1 s
  (its inactivity timer) at beta, 0.02 s of short DRX and 10 s of long DRX, each DRX period
  (0.02 s short, 0.04 s long) one 2 ms ping at 1.68 W and the rest at its tail power 1.06 W;
  idle, one 43 ms paging ping at 0.594 W every 1.28 s and 0 W between them (its idle power).
  Taken at the median LTE uplink and downlink throughputs Huang et al. report in their abstract
  (6 and 13 Mbit/s; "A Close Examination of Performance and Power Characteristics of 4G LTE
  Networks", MobiSys 2012, whose abstract also names LTE's long high-power tail a key contributor
  to its energy). Sending and receiving at once charge beta twice (an upper bound).

``ble`` has no idle power, ``wifi`` and ``ble`` no tail (no figure was read for them): set
``idle_w``, ``tail_w`` and ``tail_s`` in your own radio.

Joules per byte = power (W) x 8 / rate (bit/s).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Radio:
    name: str
    send_j_per_byte: float
    receive_j_per_byte: float
    tail_w: float = 0.0            # drawn after a transfer (above idle), for up to tail_s seconds
    tail_s: float = 0.0
    idle_w: float = 0.0            # while powered and not sending (time sending is charged at idle too: an upper bound)

    def describe(self) -> dict[str, float | str]:
        return {"name": self.name, "send_j_per_byte": self.send_j_per_byte,
                "receive_j_per_byte": self.receive_j_per_byte, "tail_w": self.tail_w, "tail_s": self.tail_s,
                "idle_w": self.idle_w}


def _per_byte(watts: float, rate_bps: float) -> float:
    return watts * 8.0 / rate_bps


VOLTS = 3.0   # assumed supply voltage for the currents below

# ARO's LTE profile (see above); rates: Huang et al.'s medians
LTE_ALPHA_UP_W_PER_MBPS = 438.39e-3
LTE_ALPHA_DOWN_W_PER_MBPS = 51.97e-3
LTE_BETA_W = 1.2
LTE_UP_MBPS, LTE_DOWN_MBPS = 6.0, 13.0


def _drx_w(period_s: float, ping_s: float = 0.002, ping_w: float = 1.68, tail_w: float = 1.06) -> float:
    """ARO's mean power in a DRX state: one ping of ``ping_s`` per period, the rest at the tail power."""
    return (ping_s * ping_w + (period_s - ping_s) * tail_w) / period_s


LTE_TAIL_PARTS = ((0.1, LTE_BETA_W), (0.02, _drx_w(0.02)), (10.0, _drx_w(0.04)))   # (seconds, watts)
LTE_TAIL_S = sum(s for s, _ in LTE_TAIL_PARTS)
LTE_TAIL_W = sum(s * w for s, w in LTE_TAIL_PARTS) / LTE_TAIL_S   # its mean power: 1.092 W over 10.12 s
LTE_IDLE_W = 0.043 * 0.594 / 1.28   # paging pings while idle: 0.020 W

RADIOS: dict[str, Radio] = {
    "wifi": Radio("wifi", _per_byte(0.380 * VOLTS, 54e6), _per_byte(0.313 * VOLTS, 54e6), idle_w=0.273 * VOLTS),
    "ble": Radio("ble", _per_byte(6.40e-3 * VOLTS, 1e6), _per_byte(6.26e-3 * VOLTS, 1e6)),
    "lte": Radio("lte", _per_byte(LTE_ALPHA_UP_W_PER_MBPS * LTE_UP_MBPS + LTE_BETA_W, LTE_UP_MBPS * 1e6),
                 _per_byte(LTE_ALPHA_DOWN_W_PER_MBPS * LTE_DOWN_MBPS + LTE_BETA_W, LTE_DOWN_MBPS * 1e6),
                 tail_w=LTE_TAIL_W, tail_s=LTE_TAIL_S, idle_w=LTE_IDLE_W),
}
