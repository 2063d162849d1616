"""`cemctl logs RUN [-f]`: the trainer's records appear once, though train.log and executor.log both hold them."""

from __future__ import annotations

import threading
from pathlib import Path

from cemctl.services.logs import follow_logs, tail_logs

RECORDS = [f"2026-11-23 18:0{i}:00,123 INFO step {i}/9 loss 2.{i}000" for i in range(3)]


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "abc123abc123"
    run.mkdir(parents=True)
    (run / "train.log").write_text("".join(r + "\n" for r in RECORDS))
    # the job's stdout: the same records, an attempt header and a warning only stdout has
    (run / "executor.log").write_text("=== 2026-11-23 18:00:00 attempt 1 on cpu0\n" + "".join(r + "\n" for r in RECORDS)
                                      + "UserWarning: something only stdout saw\n")
    return run


def test_tail_prints_every_record_once(tmp_path):
    run = _run_dir(tmp_path)
    out: list[str] = []
    assert tail_logs(run, 50, write=out.append, runs_root=tmp_path / "runs") == 2
    for record in RECORDS:
        assert out.count(record) == 1, out
    assert "UserWarning: something only stdout saw" in out and any(line.startswith("===") for line in out)


def test_follow_prints_each_new_record_once_whichever_file_has_it_first(tmp_path):
    run = _run_dir(tmp_path)
    out: list[str] = []
    stop, ready = threading.Event(), threading.Event()
    t = threading.Thread(target=follow_logs, args=(run,), kwargs={"write": out.append, "poll_s": 0.02,
                                                                 "stop": stop.is_set, "runs_root": tmp_path / "runs",
                                                                 "on_ready": ready.set})
    t.start()
    try:
        assert ready.wait(10)
        new = "2026-11-23 18:09:00,456 INFO step 9/9 loss 1.9000"
        with open(run / "executor.log", "a") as f:  # stdout first this time
            f.write(new + "\n")
        with open(run / "train.log", "a") as f:
            f.write(new + "\n" + "2026-11-23 18:09:01,000 INFO done\n")
        import time

        deadline = time.monotonic() + 10
        while "2026-11-23 18:09:01,000 INFO done" not in out and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
        t.join(timeout=10)
    assert out.count(new) == 1, out
    assert not any(r in out for r in RECORDS)  # what was there before -f started is not repeated
    assert "2026-11-23 18:09:01,000 INFO done" in out
