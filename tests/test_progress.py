"""dense_cf.progress: cadence, line format, final line, durations; and a real job's lines."""

from __future__ import annotations

import logging

import pytest

from dense_cf import progress as progress_lib
from dense_cf.progress import Progress, format_count, format_duration, format_line, timed
from dense_cf.synthetic import generate as synthetic


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def absl_caplog(caplog):
    caplog.set_level(logging.INFO, logger="absl")
    return caplog


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "absl"]


@pytest.mark.parametrize("seconds, text", [
    (0, "0.0s"), (4.25, "4.2s"), (42.9, "42s"), (60, "1m00s"), (187, "3m07s"),
    (3599, "59m59s"), (3600, "1h00m"), (7500, "2h05m"), (86400 + 4 * 3600 + 59, "1d04h"),
    (None, "?"), (-1, "?"), (float("inf"), "?"), (float("nan"), "?"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("n, text", [(0, "0"), (7, "7"), (1234567, "1,234,567"), (1234.5, "1,234"),
                                     (40.25, "40.2"), (1.234, "1.23"), (0.004, "0.004")])
def test_format_count(n, text):
    assert format_count(n) == text


def test_format_line_with_and_without_total():
    line = format_line("export", 1200, 10000, unit="passages", rate=40.0, elapsed=30.0, eta=220.0)
    assert line == ("export: 1,200/10,000 passages (12.0%), 40 passages/s, elapsed 30s, "
                    "ETA 3m40s")
    line = format_line("mining", 1200, None, unit="questions", rate=None, elapsed=5.0,
                       detail="2 shard(s) reused")
    assert line == "mining: 1,200 questions, ? questions/s, elapsed 5.0s, 2 shard(s) reused"
    assert "ETA" not in line and "%" not in line
    # a quantity formatter (bytes) carries its own unit
    line = format_line("dl", 2048, 4096, rate=1024.0, elapsed=2.0, eta=2.0, fmt=lambda x: f"{x:.0f} B")
    assert line == "dl: 2048 B/4096 B (50.0%), 1024 B/s, elapsed 2.0s, ETA 2.0s"


def test_cadence_is_time_based(absl_caplog):
    clock = FakeClock()
    p = Progress("job", 100, unit="items", every_s=10.0, clock=clock)
    clock.t += 4
    assert not p.update(10)
    clock.t += 5.9  # 9.9 s since the start: still quiet
    assert not p.update(10)
    assert _lines(absl_caplog) == []
    clock.t += 0.1  # 10 s
    assert p.update(20)
    assert _lines(absl_caplog) == ["job: 40/100 items (40.0%), 4 items/s, elapsed 10s, ETA 15s"]
    clock.t += 5  # the cadence restarts at the last line
    assert not p.update(10)
    clock.t += 5
    assert p.update(10)
    assert len(_lines(absl_caplog)) == 2


def test_every_n_logs_on_crossing_a_multiple(absl_caplog):
    clock = FakeClock()
    p = Progress("rows", unit="rows", every_s=1e9, every_n=1000, clock=clock)
    clock.t += 2
    logged = [p.update(300) for _ in range(7)]  # 300 .. 2100: crosses 1000 and 2000
    assert logged == [False, False, False, True, False, False, True]
    assert _lines(absl_caplog)[0] == "rows: 1,200 rows, 600 rows/s, elapsed 2.0s"  # no total: no ETA


def test_rate_excludes_skipped_and_restarted_work():
    clock = FakeClock()
    p = Progress("dl", 1000, start=400, every_s=1e9, clock=clock)  # 400 resumed
    assert p.rate() is None and p.eta() is None
    clock.t += 10
    p.skip(100)   # reused: counted, costs nothing
    p.set(600)    # 100 done in 10 s
    assert p.count == 600
    assert p.rate() == pytest.approx(10.0)
    assert p.eta() == pytest.approx(40.0)
    # a first step that compiled for 100 s is kept out of the steady-state rate
    clock.t += 100
    p.update(1)
    p.restart_rate()
    clock.t += 2
    p.update(10)
    assert p.rate() == pytest.approx(5.0)
    assert p.elapsed() == pytest.approx(112.0)


def test_done_line_and_context_manager(absl_caplog):
    clock = FakeClock()
    with Progress("encode", 50, unit="vectors", every_s=1e9, clock=clock,
                  detail=lambda: "3 skipped") as p:
        clock.t += 100
        p.update(50)
    assert _lines(absl_caplog) == ["encode: done, 50 vectors in 1m40s (0.50 vectors/s), 3 skipped"]


def test_disabled_progress_logs_nothing(absl_caplog):
    clock = FakeClock()
    p = Progress("quiet", 10, every_s=0.0, enabled=False, clock=clock)
    clock.t += 1
    assert p.update(5)  # due, but not logged
    p.done()
    assert _lines(absl_caplog) == [] and p.count == 5


def test_stats_for_the_training_console():
    clock = FakeClock()
    p = Progress("train", 100, unit="steps", start=0, clock=clock)
    clock.t += 30
    p.set(1, log=False)
    p.restart_rate()
    clock.t += 10
    p.set(21, log=False)
    assert p.stats() == "2 steps/s, elapsed 40s, ETA 39s"


def test_timed_logs_start_and_duration(absl_caplog):
    clock = FakeClock()
    with timed("train: compiling the train step", "train: compiled", clock=clock) as t:
        assert _lines(absl_caplog) == ["train: compiling the train step…"]
        clock.t += 12.5
    assert t.seconds == pytest.approx(12.5)
    assert _lines(absl_caplog)[-1] == "train: compiled in 12s"
    with timed("index: training", clock=clock):
        clock.t += 3
    assert _lines(absl_caplog)[-1] == "index: training done in 3.0s"


def test_synthetic_generation_logs_progress(tmp_path, absl_caplog, monkeypatch):
    """A real long job: every line has a rate and elapsed time, and the ones with a total an ETA."""
    monkeypatch.setattr(progress_lib, "DEFAULT_EVERY_S", 0.0)  # a line at every update
    synthetic.generate(str(tmp_path / "data"), num_passages=60, seed=3, workers=1,
                       num_hard_negatives=1)
    lines = _lines(absl_caplog)
    steady = [x for x in lines if ": done, " not in x]
    gen = [x for x in steady if x.startswith("synthetic: generating: ")]
    bm25 = [x for x in steady if x.startswith("synthetic: bm25 hard negatives: ")]
    assert gen and bm25, lines
    for line in gen + bm25:
        assert " passages/s" in line or " questions/s" in line
        assert "elapsed " in line and "ETA " in line and "%)" in line
    assert gen[-1].startswith("synthetic: generating: 60/60 passages (100.0%)")
    assert any(x.startswith("synthetic: generating: done, 60 passages in ") for x in lines)
    assert any(x.startswith("synthetic: bm25 hard negatives: done, ") for x in lines)
    assert any(x.startswith("synthetic: files written in ") for x in lines)
