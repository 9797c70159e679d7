"""One preparation of a live run (issue 17): every entry point that follows an input directory as a stream
(``sparkcep run --stream``, :func:`sparkcep.apply_stream`, the ``%%sparkcep --stream`` magic, ``run
STATEMENTS.sql --stream``) takes the same steps in the same order, here, so that they cannot drift:

1. :func:`prepare_live`: the input checked in plain Python (``check``: the compiled pattern queries,
   :func:`sparkcep.preflight.check_run_input`; a statement's run checks it first itself), before anything is
   staged: a mistake about the input leaves no staging directory naming it; then the staging directory the
   stream reads instead of the input (:func:`~sparkcep.spark.shedding.admitted_input`: the files there now
   handed over, the first micro-batch's and the schema's; None: read as it is);
2. the caller reads :attr:`LiveRun.read_from` and builds its result (a pattern query with
   ``apply(checkpoint=, followed=)``: the grouping a checkpoint was made with, the backlog controller on the
   followed directory);
3. :meth:`LiveRun.admit`, once the shedding stage exists and before the query starts: the admission control
   (:func:`~sparkcep.spark.shedding.follow_input`: the stage's controller counts the backlog the admission
   counts, and the admission is bounded by the stage), started, so that the first micro-batch reads every file
   there when the query starts (started after it, a file that arrived since the staging races Spark's first
   listing, and the bounded admission's first slice is watched from a micro-batch already planned);
4. the caller starts its query; :meth:`LiveRun.started`: the stage's controller follows that query only
   (:meth:`~sparkcep.spark.shedding.Shedding.bind`: not a ``--timeouts`` query beside it);
5. :meth:`LiveRun.close` (or leaving ``with``): the admission stopped, a staging directory outside the user's
   checkpoint removed.

The steps' modules are imported when used: the check comes before pyspark and pandas are imported (seconds).
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from sparkcep import preflight

if TYPE_CHECKING:
    from sparkcep.spark.shedding import FileAdmission, Shedding

__all__ = ["LiveRun", "prepare_live"]


class LiveRun:
    """A run over ``path`` (format ``fmt``) prepared by :func:`prepare_live`: the stream reads
    :attr:`read_from`; :attr:`admission` (after :meth:`admit`) hands the input's files over to ``staging``."""

    def __init__(self, path: str, fmt: str, staging: str | None, temporary: bool):
        self.path, self.fmt, self.staging, self.temporary = path, fmt, staging, temporary
        self.admission: FileAdmission | None = None

    @property
    def read_from(self) -> str:
        """The directory the stream reads: the staging directory, else the input itself."""
        return self.staging or self.path

    def admit(self, shedding: Shedding | None, checkpoint: str | None, *, type_col: str = "type",
              dropped_output: str | None = None, once: bool = False,
              queries: tuple[str, ...] = ("",)) -> FileAdmission | None:
        """Step 3: the admission control of the input, started (None: no staging directory).  ``shedding``: the
        run's shedding stage (None: none; the admission has no bound); ``checkpoint``: the one the run's query
        writes (a temporary one too: the bounded admission watches its planned micro-batches); ``queries``:
        the checkpoints inside it of the queries reading the staged files
        (:class:`~sparkcep.spark.shedding.StagedLinks`)."""
        from sparkcep.spark.shedding import follow_input

        self.admission = follow_input(shedding, self.path, self.staging, type_col, dropped_output, checkpoint,
                                      self.fmt, once=once, queries=queries)
        if self.admission is not None:
            self.admission.start()
        return self.admission

    def started(self, query, shedding: Shedding | None = None, *, watch: bool = False) -> None:
        """Step 4, ``query`` started: ``shedding``'s controller follows its progress only; ``watch`` (a run
        nobody follows, :func:`sparkcep.apply_stream`): the admission stops polling once ``query`` has ended
        (failed, or stopped directly)."""
        if shedding is not None:
            shedding.bind(query)
        if watch and self.admission is not None:
            self.admission.alive = lambda: query.isActive

    def close(self) -> None:
        """Step 5: the admission thread stopped; a staging directory outside the user's checkpoint removed
        (again: nothing more)."""
        if self.admission is not None:
            self.admission.stop()
        if self.staging is not None and self.temporary:
            shutil.rmtree(self.staging, ignore_errors=True)

    def __enter__(self) -> LiveRun:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare_live(path: str, fmt: str, *, stream: bool = True, checkpoint: str | None = None, check=(),
                 ts_col: str = "ts", schema: str | None = None) -> LiveRun:
    """Steps 1 and 2 of a run over ``path`` (module docstring): ``check``, the compiled pattern queries whose
    input is checked first (:func:`sparkcep.preflight.check_run_input`, with ``ts_col`` and ``schema``: the
    input schema as DDL, or None); then, for a ``stream`` over a local directory, its staging directory, in
    the user's ``checkpoint`` (``CHECKPOINT/_admitted``), else a temporary one (removed at :meth:`LiveRun.close`).
    A batch (not ``stream``) reads ``path`` as it is."""
    from sparkcep.spark.shedding import admitted_input

    if check:
        preflight.check_run_input(list(check), path=path, fmt=fmt, stream=stream, ts_col=ts_col, schema=schema)
    staging = admitted_input(path, fmt, follow=stream, checkpoint=checkpoint)
    return LiveRun(path, fmt, staging, temporary=not checkpoint)
