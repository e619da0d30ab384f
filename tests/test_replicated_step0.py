"""Groups of 2 ranks that meet at step 0 end alike (``replicate`` under
``trainprobe run --replicas 2 --nproc-per-replica 2``, the real lighthouse).

torchft's step-0 sync picks a source replica per group rank, and that step's
quorum differs by rank: without ReplicatedOptimizer's ``sync_group`` the two
ranks of each group kept different weights for good (seeded unlike on purpose,
``min_replicas=2`` so both groups are in step 0's quorum: the case a race decides
in tests/test_replicated_run.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import PYTHON, short_tmpdir
from tests.test_replicated_run import launched

pytest.importorskip("torchft")
pytestmark = pytest.mark.timeout(180)

SCRIPT = """
import json, os, sys, torch, torch.distributed as dist
from torch import nn
from trainprobe.hooks import replicate
dist.init_process_group("gloo")
torch.manual_seed(int(os.environ["REPLICA_GROUP_ID"]))
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
model, opt = replicate(None, model, opt, min_replicas=2)
for step in opt.steps(8):
    model(torch.randn(16, 32)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
params = [float(v) for t in model.parameters() for v in t.detach().flatten()[:8]]
row = {"group": os.environ["REPLICA_GROUP_ID"], "rank": dist.get_rank(), "params": params}
with open(sys.argv[1], "a") as fh:
    fh.write(json.dumps(row) + "\\n")
"""


def test_groups_of_two_ranks_that_meet_at_step_0_end_alike() -> None:
    work: Path = short_tmpdir("tps0-")
    (work / "train.py").write_text(SCRIPT)
    out = work / "done.jsonl"
    flags = ("--replicas", "2", "--nproc-per-replica", "2", "--no-sidecar")
    script = [PYTHON, str(work / "train.py"), str(out)]
    with launched(work, "unix:///nonexistent.sock", *flags, script=script) as run:
        assert run.proc.wait(150) == 0, run.text()[-3000:]
    done = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["group"], r["rank"]) for r in done) == [("0", 0), ("0", 1), ("1", 0), ("1", 1)]
    for r in done[1:]:
        assert r["params"] == pytest.approx(done[0]["params"], abs=1e-6), (r, done[0])
