"""jobq's pytest plugin (registered by the package's ``pytest11`` entry point): the fixtures
``jobq_inline`` and ``jobq_manual`` (:mod:`jobq.testing`) over the application's registry, named once in
the pytest configuration — ``jobq_registry = "myapp.jobs:registry"`` under ``[tool.pytest.ini_options]`` —
or by overriding the ``jobq_registry`` fixture::

    def test_signup_enqueues_the_welcome_email(jobq_manual):
        signup("ada@example.com")
        jobq_manual.assert_enqueued(kind="email.welcome")
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobq.testing import TestJobs, inline, manual
from worker.registry import Registry

__all__ = ["jobq_inline", "jobq_manual", "jobq_registry"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("jobq_registry", "the registry jobq_inline and jobq_manual run: module:attribute")


@pytest.fixture
def jobq_registry(request: pytest.FixtureRequest) -> Registry:
    """The application's registry (the ``jobq_registry`` ini option; override this fixture instead)."""
    named = str(request.config.getini("jobq_registry") or "")
    if not named:
        raise pytest.UsageError(
            'name your registry: jobq_registry = "myapp.jobs:registry" in [tool.pytest.ini_options], or '
            "override the jobq_registry fixture"
        )
    from worker.main import load_registry

    return load_registry(named)


@pytest.fixture
def jobq_inline(jobq_registry: Registry) -> Iterator[TestJobs]:
    """Every enqueue runs its job at once, in-process (:func:`jobq.testing.inline`)."""
    with inline(jobq_registry) as jobs:
        yield jobs


@pytest.fixture
def jobq_manual(jobq_registry: Registry) -> Iterator[TestJobs]:
    """Enqueues are recorded; ``drain()`` runs them (:func:`jobq.testing.manual`)."""
    with manual(jobq_registry) as jobs:
        yield jobs
