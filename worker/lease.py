"""The lease keeper, shared with the push dispatcher: :mod:`jqcore.leases` (re-exported here)."""

from jqcore.leases import DEFAULT_LEASE_MS, LeaseKeeper, LeaseSignals, Lost, Owned

__all__ = ["DEFAULT_LEASE_MS", "LeaseKeeper", "LeaseSignals", "Lost", "Owned"]
