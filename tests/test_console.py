"""What run/demo print while Spark works: stage progress (from a fake status tracker), the summary line, the
--quiet/--verbose flags, and (one Spark test) a batch run's stderr: a summary and no start-up banner."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from sparkcep.cli import build_parser
from sparkcep.console import StageProgress, stage_lines, summary_line


@dataclass
class Job:
    jobId: int
    stageIds: list[int]
    status: str = "RUNNING"


@dataclass
class Stage:
    stageId: int
    numTasks: int
    numActiveTasks: int
    numCompletedTasks: int
    numFailedTasks: int = 0
    currentAttemptId: int = 0
    name: str = "stage"


class FakeTracker:
    """PySpark's StatusTracker methods over dicts the test changes between polls."""

    def __init__(self, jobs: dict[int, Job], stages: dict[int, Stage]):
        self.jobs, self.stages = jobs, stages

    def getActiveJobsIds(self):
        return list(self.jobs)

    def getJobInfo(self, job_id):
        return self.jobs.get(job_id)

    def getStageInfo(self, stage_id):
        return self.stages.get(stage_id)


def test_stage_lines_place_each_running_stage_in_its_job():
    tracker = FakeTracker({2: Job(2, [7, 5, 6])},
                          {5: Stage(5, 4, 0, 4), 6: Stage(6, 200, 2, 120), 7: Stage(7, 4, 0, 0)})
    # stage 5 is done, 7 waits for 6: only 6 is shown, second of the job's three stages
    assert stage_lines(tracker) == {6: "job 2, stage 2/3: 120/200 tasks"}


def test_stage_lines_count_failed_tasks_and_skip_unknown_jobs_and_stages():
    tracker = FakeTracker({1: Job(1, [0, 1]), 3: None}, {1: Stage(1, 10, 1, 3, numFailedTasks=2)})
    tracker.jobs[4] = Job(4, [9])  # a stage the tracker no longer knows
    assert stage_lines(tracker) == {1: "job 1, stage 2/2: 3/10 tasks, 2 failed"}


def test_progress_prints_a_line_only_when_it_changed():
    stage = Stage(0, 8, 2, 1)
    tracker = FakeTracker({0: Job(0, [0])}, {0: stage})
    out = io.StringIO()
    p = StageProgress(tracker, out=out)
    assert p.poll() == ["job 0, stage 1/1: 1/8 tasks"]
    assert p.poll() == []
    stage.numCompletedTasks = 5
    p.poll()
    assert out.getvalue().splitlines() == ["sparkcep: job 0, stage 1/1: 1/8 tasks",
                                           "sparkcep: job 0, stage 1/1: 5/8 tasks"]


def test_progress_survives_a_failing_tracker():
    class Broken:
        def getActiveJobsIds(self):
            raise RuntimeError("SparkContext stopped")

    assert StageProgress(Broken(), out=io.StringIO()).poll() == []


def test_progress_thread_polls_while_the_block_runs():
    import time

    tracker = FakeTracker({0: Job(0, [0])}, {0: Stage(0, 4, 1, 1)})
    out = io.StringIO()
    with StageProgress(tracker, out=out, interval=0.01):
        deadline = time.monotonic() + 5
        while not out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert out.getvalue() == "sparkcep: job 0, stage 1/1: 1/4 tasks\n"


def test_summary_line():
    assert (summary_line(read=5000, results=12, dead_letters=3, seconds=4.24, output="out/")
            == "sparkcep: read 5000 events, 12 results, 3 dead letters in 4.2 s, wrote out/")
    assert (summary_line(read=1, results=1, dead_letters=1, late=2, seconds=0.05)
            == "sparkcep: read 1 event, 1 result, 1 dead letter, 2 late in 0.1 s")
    assert summary_line(read=None, results=0, dead_letters=0, seconds=1) == (
        "sparkcep: 0 results, 0 dead letters in 1.0 s")


@pytest.mark.parametrize("command", [["run", "q.cep", "--input", "e"], ["demo"]])
def test_quiet_and_verbose_flags(command):
    parser = build_parser()
    assert parser.parse_args(command + ["--quiet"]).quiet
    assert parser.parse_args(command + ["-v"]).verbose
    args = parser.parse_args(command)
    assert not args.quiet and not args.verbose
    with pytest.raises(SystemExit):
        parser.parse_args(command + ["--quiet", "--verbose"])


BANNER = ("Using Spark's default log4j profile", "Setting default log level", "NativeCodeLoader",
          "To adjust logging level")


@pytest.mark.spark
def test_batch_run_prints_a_summary_and_no_banner(tmp_path):
    """A fresh process (the banner is printed when the JVM starts): stderr holds the summary, no banner line."""
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"type": t, "ts": i, "x": i}) + "\n"
                              for i, t in enumerate("ABAB")) + "not json\n")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "sparkcep.cli", "run", "-e", "PATTERN SEQ(A a, B b) WITHIN 10",
                          "--input", str(events), "--output", str(out), "--master", "local[1]"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert not [line for line in lines if any(b in line for b in BANNER)], run.stderr
    summary = [line for line in lines if line.startswith("sparkcep: read ")]
    # SEQ(A a, B b) with skip-till-any-match over A0 B1 A2 B3: (0,1), (0,3), (2,3)
    assert summary and summary[-1].startswith(
        "sparkcep: read 5 events, 3 results, 1 dead letter in "), run.stderr
    assert summary[-1].endswith(f", wrote {out}")
