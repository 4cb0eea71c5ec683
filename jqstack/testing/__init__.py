"""jqstack.testing: the tests' and the fault suite's stack tooling — the pytest session stack
(:mod:`~jqstack.testing.backends`: native servers or testcontainers, :mod:`~jqstack.testing.containers`)
and the TCP fault proxy (:mod:`~jqstack.testing.faultproxy`, toxiproxy).

It lives in the checkout only: the wheel and the image leave it out (``exclude`` in ``pyproject.toml``;
``tests/unit/test_wheel.py`` checks). It stays a part of ``jqstack`` so ``loadtest``'s fault suite and the
tests share it under the same type checks and import contracts as the rest of jobq.
"""
