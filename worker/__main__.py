"""``python -m worker`` is ``jobq worker`` without the rest of the CLI."""

from worker.cli import main

main()
