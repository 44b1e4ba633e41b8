"""What a radio spends per byte: one figure for sending, one for receiving, an optional tail
(energy a radio keeps spending after a transfer before it sleeps, charged once per transfer) and
an optional idle power (listening between transfers, charged over the time the device is powered).

Presets, from what each figure's source says (``scenarios/REFERENCE.md`` lists them too):

- ``wifi``: ns-3's ``WifiRadioEnergyModel`` defaults, TX 0.380 A, RX 0.313 A and idle 0.273 A
  (``src/wifi/model/wifi-radio-energy-model.cc``), at an assumed 3.0 V supply and an assumed
  54 Mbit/s (802.11g) rate; a radio that never sleeps, as ns-3's default state machine (its sleep
  current, 0.033 A, needs a sleep schedule p2pfed does not model).
- ``ble``: Nordic nRF52840 product specification, radio current at 1 Mbps BLE with the DC/DC
  regulator: TX at 0 dBm 6.40 mA, RX 6.26 mA, at an assumed 3.0 V supply and the 1 Mbit/s PHY
  rate (no protocol overhead: a lower bound per byte).
- ``lte``: illustrative assumptions, not measurements: 2.0 W sending and 1.5 W receiving, at the
  median LTE uplink and downlink throughputs Huang et al. report in their abstract (6 and
  13 Mbit/s; "A Close Examination of Performance and Power Characteristics of 4G LTE Networks",
  MobiSys 2012). The same abstract finds LTE's long high-power tail a key contributor to its
  energy; no preset sets ``tail_j`` (no figure was read for it): set it in your own radio.

``ble`` and ``lte`` have no idle power (no figure was read for them): set ``idle_w`` in your own.

Joules per byte = power (W) x 8 / rate (bit/s).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Radio:
    name: str
    send_j_per_byte: float
    receive_j_per_byte: float
    tail_j: float = 0.0            # per transfer started (an upper bound when transfers run back to back)
    idle_w: float = 0.0            # while powered and not sending (time sending is charged at idle too: an upper bound)

    def describe(self) -> dict[str, float | str]:
        return {"name": self.name, "send_j_per_byte": self.send_j_per_byte,
                "receive_j_per_byte": self.receive_j_per_byte, "tail_j": self.tail_j, "idle_w": self.idle_w}


def _per_byte(watts: float, rate_bps: float) -> float:
    return watts * 8.0 / rate_bps


VOLTS = 3.0   # assumed supply voltage for the currents below
RADIOS: dict[str, Radio] = {
    "wifi": Radio("wifi", _per_byte(0.380 * VOLTS, 54e6), _per_byte(0.313 * VOLTS, 54e6), idle_w=0.273 * VOLTS),
    "ble": Radio("ble", _per_byte(6.40e-3 * VOLTS, 1e6), _per_byte(6.26e-3 * VOLTS, 1e6)),
    "lte": Radio("lte", _per_byte(2.0, 6e6), _per_byte(1.5, 13e6)),
}
