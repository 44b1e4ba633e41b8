"""Wire codec and ZeroMQ channels shared by the simulator and real peers."""

from p2pfed.transport.channel import ChannelStats, Mailbox, Outbox, SocketConfigurer, inproc_endpoint, new_namespace
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
    "SocketConfigurer",
    "decode",
    "encode",
    "encoded_size",
    "inproc_endpoint",
    "new_namespace",
]
