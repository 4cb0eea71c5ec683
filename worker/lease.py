"""The lease keeper, shared with the push dispatcher: :mod:`jqruntime.leases` (re-exported here)."""

from jqruntime.leases import DEFAULT_LEASE_MS, LeaseKeeper, LeaseSignals, Lost, Owned

__all__ = ["DEFAULT_LEASE_MS", "LeaseKeeper", "LeaseSignals", "Lost", "Owned"]
