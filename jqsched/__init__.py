"""jqsched: the scheduler service (``jobq scheduler``): every queue's timers, split among instances."""
