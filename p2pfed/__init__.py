"""p2pfed: decentralized, personalized federated learning without a server."""

__version__ = "0.1.0"
