#!/usr/bin/env python3
"""The Python Trainer against zoe-train at NP ranks (test_trainer.py says what is compared).

usage: run_trainer_tests.py --np NP --mpiexec MPIEXEC --package BUILD/python

1. zoe-train trains the reference run at NP ranks (its --save every 3 steps, --metrics);
   `python -m zoe.train --help` is zoe-train's help, first.
2. mpiexec -np NP python -m pytest test_trainer.py: the same run from Python, the resume of
   zoe-train's checkpoint, bad input.
3. zoe-train resumes the checkpoint Python saved at step 3; test_zoe_train_resumed_python_save
   compares its end with the reference's.
Exits 77 (skipped) without pytest, mpi4py (NP > 1) or safetensors, except under CI=true.
"""
import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--package", required=True)
    a = ap.parse_args()
    needed = ["pytest", "numpy", "safetensors"] + (["mpi4py"] if a.np > 1 else [])
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        print(f"run_trainer_tests: {sys.executable} lacks {', '.join(missing)} "
              "(tests/python/requirements.txt)")
        return 1 if os.environ.get("CI") == "true" else 77
    sys.path[:0] = [a.package, HERE]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([a.package, os.environ.get("PYTHONPATH", "")]))
    from test_trainer import RUN  # the run, written once

    import zoe._options
    flags = zoe._options.as_flags(RUN)
    zoe_train = os.path.join(a.package, "zoe", "bin", "zoe-train")
    mpi = [a.mpiexec, "-np", str(a.np), "--oversubscribe", "--bind-to", "none"]

    def run(cmd):
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, env=env)

    out = subprocess.run([sys.executable, "-m", "zoe.train", "--help"], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert "--micro-batch" in out and "--dpu-warmup" in out, out
    with tempfile.TemporaryDirectory(prefix="zoe_py_trainer_") as ref:
        env["ZOE_TEST_REF"] = ref
        run(mpi + [zoe_train, *flags, f"--save={ref}/zoe", "--save-every=3",
                   f"--metrics={ref}/zoe.jsonl"])
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  os.path.join(HERE, "test_trainer.py")]
        run(mpi + pytest)
        run(mpi + [zoe_train, *flags, f"--resume={ref}/py/step-00000003",
                   f"--save={ref}/zoe-from-py", f"--metrics={ref}/zoe-from-py.jsonl"])
        run(pytest + ["-k", "test_zoe_train_resumed_python_save"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
