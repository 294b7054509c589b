"""validation.run.collectives.supervise: what a worker's crash, hang or the run's deadline
leaves in the results file (workers are small python processes, no GPU)."""
import json
import sys
from pathlib import Path

from validation.run.supervisor import supervise

# a worker that starts each case it is given (heartbeat) and then, by the case's name,
# finishes it ("ok..."), crashes ("crash...") or hangs ("hang...")
WORKER = r'''
import json, os, sys, time
out, ids = sys.argv[1], json.load(open(sys.argv[2]))
for cid in ids:
    open(out + ".current", "w").write(json.dumps({"id": cid, "t": time.time()}))
    if cid.startswith("crash"):
        os._exit(5)
    if cid.startswith("hang"):
        time.sleep(60)
    open(out, "a").write(json.dumps({"id": cid, "ok": True}) + "\n")
'''


def _run(tmp_path: Path, ids: list[str], case_timeout: float, deadline_s: float) -> dict:
    out = tmp_path / "rows.jsonl"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    supervise(ids, out, lambda ids_file: [sys.executable, str(script), str(out), str(ids_file)],
              case_timeout, deadline_s)
    return {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}


def test_a_crash_fails_its_case_and_a_fresh_worker_takes_the_rest(tmp_path):
    rows = _run(tmp_path, ["ok1", "crash1", "ok2"], case_timeout=30, deadline_s=30)
    assert rows["ok1"]["ok"] and rows["ok2"]["ok"]
    assert not rows["crash1"]["ok"] and "exited with 5" in rows["crash1"]["error"]


def test_the_case_running_at_the_deadline_is_not_run_not_failed(tmp_path):
    # the hang outlives the 2 s deadline (its own limit is 30 s): the worker is killed and
    # the case, like the one after it, is recorded as not run
    rows = _run(tmp_path, ["ok1", "hang1", "ok2"], case_timeout=30, deadline_s=2)
    assert rows["ok1"]["ok"]
    for cid in ("hang1", "ok2"):
        assert rows[cid]["skipped"] and rows[cid]["error"] == "not run: deadline reached"
