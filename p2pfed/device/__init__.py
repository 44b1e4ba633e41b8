"""One device, whatever runs it: what it does each time it acts, and how it takes a message in.

The synchronous simulation, the contact simulation and the real peer all drive a device through
``DeviceLoop`` and feed it messages through ``Intake``; they differ only in the clock and the
links they give it. ``energy`` keeps each device's energy account, which decides whether it may
still act.
"""

from p2pfed.device.intake import Control, Held, Intake, IntakeRules, ResendRequest
from p2pfed.device.loop import (DeviceLoop, Outgoing, PendingFusion, act_together, evaluate_together,
                                finish_together, merge_parts, start_together)
from p2pfed.device.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from p2pfed.device.wire import RELAY_KEY, RESEND_KIND, encode_resend_request, encode_share, full_model_bytes

__all__ = ["CheckpointError", "Control", "DeviceLoop", "Held", "Intake", "IntakeRules", "Outgoing", "PendingFusion",
           "RELAY_KEY", "RESEND_KIND", "ResendRequest", "act_together", "encode_resend_request", "encode_share",
           "evaluate_together", "finish_together", "full_model_bytes", "load_checkpoint", "merge_parts",
           "save_checkpoint", "start_together"]
