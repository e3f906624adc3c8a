"""The finished units of a long job, kept so that a re-submitted job goes on where it stopped.

A job that runs many independent units (the trainings of a ground-truth job, docs/method.md §10;
the control, lags or lag chunks of a budget-protocol job, §10b) keeps each finished unit's result in
its ``.resume/`` directory (:func:`learnwin.infra.layout.resume_dir`), written atomically after
the unit, and a re-run with the same settings takes the result from there instead of running the
unit again. A unit's randomness must come from the job's settings and the unit alone (its own
seeds), never from what ran before it, so that skipping a unit shifts nothing after it: a
resumed job's outputs are then bitwise an uninterrupted one's. Results are plain JSON (numbers,
strings, lists, dicts; a float round-trips exactly). The state carries a fingerprint of the
settings and is ignored when they changed; the job's adapter removes it once its outputs are
written (:func:`clear`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from learnwin.infra import io

log = logging.getLogger(__name__)

STATE = "units.json"


def fingerprint(*parts) -> str:
    """A short hash of ``parts`` (JSON, keys sorted; other types by ``str``): the settings a
    resume state belongs to."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Units:
    """The finished units of one job, by key, kept in ``directory`` (None: in memory only, no
    resume) for the job of ``settings`` (anything :func:`fingerprint` takes); ``who`` names the
    job in the log."""

    def __init__(self, directory: str | Path | None, settings, who: str):
        self.path = None if directory is None else Path(directory) / STATE
        self.fingerprint, self.who = fingerprint(settings), who
        self.done: dict[str, Any] = {}
        if self.path is not None and self.path.exists():
            state = json.loads(self.path.read_text())
            if state.get("fingerprint") == self.fingerprint:
                self.done = state["units"]
                log.info("%s: resuming, %d units done (%s)", who, len(self.done), self.path)
            else:
                log.info("%s: settings changed, ignoring stale resume state %s", who, self.path)

    def run(self, key: str, compute: Callable[[], Any]) -> Any:
        """Unit ``key``'s result: the kept one, or ``compute()`` (JSON-able), kept at once."""
        if key in self.done:
            return self.done[key]
        result = compute()
        self.done[key] = result
        if self.path is not None:  # keys in their order: a row's are a table's columns
            with io.atomic_path(self.path) as tmp:
                tmp.write_text(json.dumps({"fingerprint": self.fingerprint, "units": self.done}))
        return result


def clear(directory: str | Path) -> None:
    """Remove a job's resume state (after its outputs are written)."""
    shutil.rmtree(directory, ignore_errors=True)
