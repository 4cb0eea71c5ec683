"""What ``jobq dev`` learns of the application it runs, and the lines it prints for it.

The application is imported in a child process (``python -m jobq.devapp APP``), never in ``jobq dev``
itself: each reload reads the code as it is on disk now (queues added, a kind renamed), and code that
does not import is reported without taking the command down. :func:`probe` runs that child and answers an
:class:`AppInfo`: the registry's queues and kinds (with the arguments each handler requires, for the
example lines) and the folder to watch (the application's top package, or its module's file).
"""

from __future__ import annotations

import importlib
import inspect
import json
import shlex
import subprocess
import sys
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["AppInfo", "Kind", "ProbeFailed", "curl_line", "probe", "python_line"]


@dataclass(frozen=True)
class Kind:
    kind: str
    queue: str
    required: tuple[str, ...]
    """The handler's arguments without a default (a payload model's required fields)."""


@dataclass(frozen=True)
class AppInfo:
    queues: tuple[str, ...]
    """Every queue the registry's kinds name, sorted."""
    kinds: tuple[Kind, ...]
    watch: Path
    """The application's top package's folder (or, for a top-level module, its file)."""


class ProbeFailed(Exception):
    """The application did not import (its error's last lines are the message)."""


def probe(app: str, env: Mapping[str, str], timeout_s: float = 60.0) -> AppInfo:
    """Import ``app`` (``module:attribute``) in a child process with ``env``; :class:`ProbeFailed` with
    the end of its output when it cannot."""
    done = subprocess.run(
        [sys.executable, "-m", "jobq.devapp", app],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ProbeFailed(tail or f"exit status {done.returncode}")
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    kinds = tuple(Kind(k["kind"], k["queue"], tuple(k["required"])) for k in doc["kinds"])
    return AppInfo(tuple(doc["queues"]), kinds, Path(doc["watch"]))


def _required(spec: Any) -> list[str]:
    if spec.payload is not None:
        return [name for name, field in spec.payload.model_fields.items() if field.is_required()]
    try:
        params = inspect.signature(spec.fn).parameters.values()
    except (TypeError, ValueError):
        return []
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in plain and p.default is inspect.Parameter.empty]


def _watch_path(module_name: str) -> str:
    top = importlib.import_module(module_name.split(".")[0])
    locations = list(getattr(top, "__path__", []))
    if locations:  # a package (a namespace package's first folder)
        return str(Path(locations[0]).resolve())
    return str(Path(top.__file__ or ".").resolve())


def _describe(app: str) -> dict[str, Any]:
    from worker.main import load_registry

    registry = load_registry(app)
    specs = registry.kinds()
    return {
        "queues": sorted(registry.queues()),
        "kinds": [{"kind": s.kind, "queue": s.queue, "required": _required(s)} for s in specs],
        "watch": _watch_path(app.partition(":")[0]),
    }


def _print_traceback(exc: BaseException) -> None:
    """``exc``'s traceback without the import machinery's frames (what is left points into the app)."""
    shown = traceback.TracebackException.from_exception(exc)
    kept = [f for f in shown.stack if not f.filename.startswith("<frozen") and "importlib" not in f.filename]
    shown.stack = traceback.StackSummary.from_list(kept)
    print("".join(shown.format()), end="", file=sys.stderr)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m jobq.devapp module:attribute", file=sys.stderr)
        return 64
    from jqcore.errors import ConfigError

    try:
        doc = _describe(argv[0])
    except ConfigError as exc:  # not importable, or not a Registry: the error names it (its cause chained)
        if exc.__cause__ is not None:
            _print_traceback(exc.__cause__)
        print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
        return 2
    except Exception as exc:  # the app's own import failed otherwise (a SyntaxError, a NameError...)
        _print_traceback(exc)
        print(f"error (app_invalid): --app {argv[0]!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(doc))
    return 0


# ---- the lines ``jobq dev`` prints -----------------------------------------------------------------


def _example(kinds: Sequence[Kind], queues: Sequence[str]) -> tuple[str, str, dict[str, str]]:
    """(queue, kind, args) of an example job: the first kind on a served queue."""
    served = [k for k in kinds if k.queue in queues] or list(kinds)
    if not served:
        return (queues[0] if queues else "default"), "my.kind", {}
    first = served[0]
    return first.queue, first.kind, {name: f"<{name}>" for name in first.required}


def curl_line(url: str, token: str, kinds: Sequence[Kind], queues: Sequence[str]) -> str:
    """A ``curl`` that enqueues a job of the application's first kind (its arguments as placeholders)."""
    queue, kind, args = _example(kinds, queues)
    body: dict[str, Any] = {"kind": kind, "args": args} if args else {"kind": kind}
    auth = _quoted(f"Authorization: Bearer {token}")
    return (
        f"curl -H {auth} -H 'Content-Type: application/json' "
        f"-d {shlex.quote(json.dumps(body))} {url}/v1/queues/{queue}/jobs"
    )


def _quoted(text: str) -> str:
    """``text`` for a shell: in double quotes when it names a variable (``$JOBQ_TOKEN``), else quoted."""
    return f'"{text}"' if "$" in text else shlex.quote(text)


def python_line(url: str, token: str, kinds: Sequence[Kind], queues: Sequence[str]) -> str:
    """A one-line Python enqueue through ``jobq.Client.from_env()`` (``JOBQ_URL``, ``JOBQ_TOKEN``) that waits
    for the job's result."""
    queue, kind, args = _example(kinds, queues)
    given = ", ".join(json.dumps(v) for v in (queue, kind, args))  # double quotes: the shell's are single
    code = f"import jobq; h = jobq.Client.from_env().enqueue_kind({given}); print(h.result(timeout=30))"
    return f"JOBQ_URL={url} JOBQ_TOKEN={_quoted(token)} python -c {shlex.quote(code)}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
