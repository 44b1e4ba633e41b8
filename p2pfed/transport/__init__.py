"""Wire codec and ZeroMQ channels shared by the simulator and real peers."""

from p2pfed.transport.channel import (
    REJECT_MULTIPART,
    REJECT_OVERSIZED,
    ChannelStats,
    Mailbox,
    Outbox,
    Rejected,
    SocketConfigurer,
    inproc_endpoint,
    new_namespace,
    user_id,
)
from p2pfed.transport.codec import (
    ALLOWED_DTYPES,
    DEFAULT_MAX_BYTES,
    CodecError,
    Message,
    decode,
    encode,
    encoded_size,
)

__all__ = [
    "ALLOWED_DTYPES",
    "ChannelStats",
    "CodecError",
    "DEFAULT_MAX_BYTES",
    "Mailbox",
    "Message",
    "Outbox",
    "REJECT_MULTIPART",
    "REJECT_OVERSIZED",
    "Rejected",
    "SocketConfigurer",
    "decode",
    "encode",
    "encoded_size",
    "inproc_endpoint",
    "new_namespace",
    "user_id",
]
