import common


def noop(due: float) -> None:
    common.record(due)
