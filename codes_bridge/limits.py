"""The CODES director server's bounds, apart from the server (:mod:`codes_bridge.director`): ``hybridsim serve``
shows their defaults in its help without importing the server (as :mod:`hybridsim.service.limits` does for the gRPC
services)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DirectorLimits:
    """What one director server accepts, so that no client can exhaust its memory or time.

    ``max_request_bytes``: larger ZeroMQ messages are dropped by ZeroMQ itself (``ZMQ_MAXMSGSIZE``: the sender's
    connection is closed, no reply); ``max_clients``: distinct client ids with records (a new one beyond it evicts
    the least recently used client, so a flood of ids never locks real clients out); ``max_records_per_client``:
    iteration times kept per client (older ones are dropped; the models look at the last few);
    ``max_total_records``: iteration times kept over all clients (beyond it the least recently used clients are
    evicted; only a request that cannot fit even then fails)."""

    max_request_bytes: int = 16 * 1024 * 1024
    max_clients: int = 65_536
    max_records_per_client: int = 100_000
    max_total_records: int = 20_000_000

    def __post_init__(self):
        for name in ("max_request_bytes", "max_clients", "max_records_per_client", "max_total_records"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
