"""Run a p2pfed sweep on a SLURM cluster through dask-jobqueue (see docs/sweeps-on-slurm.md).

Start it on the login node (or in a small long-running job); it submits worker jobs, runs the
sweep on them and writes the results where every node sees them. Edit the settings below.

    pip install -e '.[slurm]'
    python docs/slurm_sweep.py sweeps/wisdm-static-seeds.yaml --out /shared/runs/wisdm-static-seeds --jobs 32
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    from dask_jobqueue import SLURMCluster
except ModuleNotFoundError:
    sys.exit("docs/slurm_sweep.py needs dask-jobqueue: pip install -e '.[slurm]'")

from p2pfed.sweeps.run import run_sweep

VENV = Path(sys.prefix)  # the same environment on the worker nodes (a shared file system)


def make_cluster(args: argparse.Namespace) -> SLURMCluster:
    """One job = one Dask worker process with one thread on one core: p2pfed runs one cell per worker."""
    return SLURMCluster(
        queue=args.partition, account=args.account, walltime=args.walltime,
        cores=1, processes=1, memory=args.memory,
        job_name="p2pfed-sweep", log_directory=str(Path(args.out) / "slurm-logs"),
        job_script_prologue=[f"source {VENV}/bin/activate",
                             "export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"],
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", type=Path)
    p.add_argument("--out", required=True, type=Path, help="results folder on the shared file system")
    p.add_argument("--jobs", type=int, default=16, help="worker jobs (cells run in parallel)")
    p.add_argument("--partition", help="SLURM partition (#SBATCH -p)")
    p.add_argument("--account", help="SLURM account (#SBATCH -A)")
    p.add_argument("--walltime", default="04:00:00", help="per worker job; a cell must fit in it")
    p.add_argument("--memory", default="4GiB", help="per worker job")
    p.add_argument("--print-job-script", action="store_true", help="show the job script and stop")
    args = p.parse_args(argv)
    with make_cluster(args) as cluster:
        if args.print_job_script:
            print(cluster.job_script())
            return 0
        cluster.scale(jobs=args.jobs)
        # --resume: a sweep cut short by the allocation's end picks up where it stopped when rerun
        return run_sweep(args.sweep, args.out, scheduler=cluster.scheduler_address, resume=True)


if __name__ == "__main__":
    sys.exit(main())
