"""Adds programs on which nuvec and MLX differed to nuvec's regression cases.

Reads a JSON list of {"name", "program"} (as `cargo xtask fuzz-mlx` writes to
target/mlx-diff-failures.json), runs each program in MLX 0.32.4 through mlx_diff.py, and
appends {"name", "program", "mlx"} to crates/nuvec/tests/fixtures/mlx_diff_regressions.json
(skipping programs already there). The test `saved_regressions_agree_with_mlx_s_recorded_results`
replays them in nuvec without needing MLX.

Run: .venv-mlx/bin/python scripts/golden/add_mlx_diff_regressions.py target/mlx-diff-failures.json
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "crates/nuvec/tests/fixtures/mlx_diff_regressions.json"


def main():
    found = json.loads(Path(sys.argv[1]).read_text())
    cases = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else []
    known = {json.dumps(c["program"], sort_keys=True) for c in cases}
    new = [f for f in found if json.dumps(f["program"], sort_keys=True) not in known]
    if not new:
        print("no new programs")
        return
    lines = "".join(json.dumps(f["program"]) + "\n" for f in new)
    results = subprocess.run(
        [sys.executable, str(ROOT / "scripts/golden/mlx_diff.py")],
        input=lines,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for f, result in zip(new, results):
        cases.append({"name": f["name"], "program": f["program"], "mlx": json.loads(result)})
    FIXTURE.write_text(json.dumps(cases, indent=1) + "\n")
    print(f"{len(new)} programs added, {len(cases)} in all")


if __name__ == "__main__":
    main()
