#!/usr/bin/env python3
"""Where the CPU time of one benchmark point goes, per rank.

Runs `bench_distributed` for one op and size on RANKS ranks over loopback (through
`nuvec launch`), each rank under `perf record`, and prints per rank:

- the point's median time, as the benchmark measures it;
- how busy the rank was: CPU seconds (user and system) over the run's wall-clock seconds,
  where 1.0 is one core all the time; with 2 ranks on 2 cores, about 1.0 each means the
  machine had no idle time to give;
- the share of its samples in copying (the kernel's copies into and out of socket buffers,
  and memcpy/memmove in user space), in the rest of the kernel (TCP, scheduling, system
  calls), and in the rest of user space (nuvec's own code, the benchmark, libc).

It needs `perf` (linux-tools) and the release builds:

    cargo build --release -p nuvec-cli -p nuvec-bench --bin nuvec --bin bench_distributed
    python3 scripts/bench/cpu_breakdown.py all_gather 16M        # [RANKS] [BUDGET] [PORT]

The shares are of sampled CPU time, so they estimate where the work goes; they are not
timings. Sampling slows the point itself (2 ranks, 16 MB ping-pong: 5.85 ms under perf
against 3.98 ms in the benchmark), and the busy fraction counts each rank's start-up and
warm-up, and `perf record`'s own work, too.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

KERNEL_COPIES = re.compile(r"^(_copy_(from|to)_iter|copy_user_|rep_movs|__copy_user|copyin|copyout)")
USER_COPIES = re.compile(r"^(__memmove|__memcpy|memcpy|memmove)")


def usage():
    print(__doc__.strip().splitlines()[0])
    print("usage: cpu_breakdown.py OP SIZE [RANKS] [BUDGET_SECONDS] [PORT]")
    sys.exit(2)


def shares(data_path):
    """Percentages of samples: kernel copies, user copies, other kernel, other user."""
    report = subprocess.run(
        ["perf", "report", "-i", data_path, "--no-children", "--sort", "sym", "--stdio"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    totals = {"kernel copies": 0.0, "user copies": 0.0, "other kernel": 0.0, "other user": 0.0}
    for line in report.splitlines():
        match = re.match(r"^\s*([\d.]+)%\s+\[(.)\]\s+(\S+)", line)
        if not match:
            continue
        percent, space, symbol = float(match.group(1)), match.group(2), match.group(3)
        if space == "k":
            key = "kernel copies" if KERNEL_COPIES.match(symbol) else "other kernel"
        else:
            key = "user copies" if USER_COPIES.match(symbol) else "other user"
        totals[key] += percent
    return totals


def main():
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        usage()
    op, size = sys.argv[1], sys.argv[2]
    ranks = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    budget = sys.argv[4] if len(sys.argv) > 4 else "3"
    port = sys.argv[5] if len(sys.argv) > 5 else "27400"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    launcher = os.path.join(root, "target/release/nuvec")
    bench = os.path.join(root, "target/release/bench_distributed")
    for path in (launcher, bench):
        if not os.path.exists(path):
            sys.exit(f"cpu_breakdown: {path} is missing; build it first (see --help)")
    with tempfile.TemporaryDirectory() as out:
        # Each rank: perf record around the benchmark, and the rank's own CPU times (user,
        # system, wall) from its resource usage, written next to its samples.
        rank_cmd = (
            'python3 -c \'import os,resource,subprocess,sys,time\n'
            'start=time.time()\n'
            'code=subprocess.call(sys.argv[1:])\n'
            'ru=resource.getrusage(resource.RUSAGE_CHILDREN)\n'
            'open(os.environ["OUT"]+"/times."+os.environ["MLX_RANK"],"w").write('
            '"%f %f %f" % (ru.ru_utime, ru.ru_stime, time.time()-start))\n'
            'sys.exit(code)\' '
            f'perf record -q -o {out}/perf.$MLX_RANK.data -- {bench} '
            f"--ops {op} --sizes {size} --budget {budget}"
        )
        env = dict(os.environ, OUT=out)
        started = time.time()
        run = subprocess.run(
            [launcher, "launch", "-n", str(ranks), "-p", port, "--no-prefix", "--",
             "bash", "-c", rank_cmd],
            capture_output=True,
            text=True,
            env=env,
        )
        if run.returncode != 0:
            sys.exit(f"cpu_breakdown: the ranks failed (exit {run.returncode}):\n{run.stderr[-2000:]}")
        results = [json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")]
        if not results:
            sys.exit(f"cpu_breakdown: the benchmark printed no result:\n{run.stdout}{run.stderr}")
        point = results[0]
        print(
            f"{op} {size} on {ranks} ranks: median {point['median_us']:.1f} us over "
            f"{point['iters']} iterations, results {'checked' if point['ok'] else 'WRONG'}; "
            f"run {time.time() - started:.1f} s"
        )
        for rank in range(ranks):
            user, system, wall = map(float, open(f"{out}/times.{rank}").read().split())
            parts = shares(f"{out}/perf.{rank}.data")
            print(
                f"  rank {rank}: busy {(user + system) / wall:.2f} of a core "
                f"(user {user:.2f} s, system {system:.2f} s, wall {wall:.2f} s); samples: "
                + ", ".join(f"{key} {value:.0f}%" for key, value in parts.items())
            )


if __name__ == "__main__":
    main()
