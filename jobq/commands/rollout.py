"""``jobq rollout``: roll one Deployment of a release to its new pod template and wait (the Helm chart's
pre-upgrade hook: the schedulers before the relays and the workers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jobq.rollout import RolloutFailed, in_cluster, roll

__all__ = ["rollout"]


def rollout(
    manifest: Annotated[
        Path,
        typer.Argument(exists=True, dir_okay=False, help="The Deployment as the chart renders it (JSON)."),
    ],
    timeout: Annotated[float, typer.Option(min=1, help="Seconds the rollout may take.")] = 600.0,
) -> None:
    """Roll the Deployment MANIFEST names to MANIFEST's pod template and wait until every replica runs it
    (in a pod: the service account's token; it needs get and patch on that Deployment). No such Deployment
    yet: nothing to do. Exit 1 when it does not roll in time (Helm then stops the upgrade)."""
    api, namespace = in_cluster()
    try:
        roll(api, namespace, json.loads(manifest.read_text()), timeout, say=typer.echo)
    except RolloutFailed as exc:
        typer.echo(f"error (rollout_failed): {exc}", err=True)
        raise typer.Exit(1) from exc
