"""zoe.Trainer against zoe-train on the same run, and its handling of bad input.

Run by tests/python/run_trainer_tests.py --np NP (ctest: python_trainer_npN), which first trains the
reference with zoe-train at NP ranks into $ZOE_TEST_REF:
  zoe/            --save, every 3 steps: step-00000003 and step-00000006
  zoe.jsonl       --metrics
then runs this file under mpiexec -np NP, then zoe-train once more, resumed from the checkpoint
that test_same_run_as_zoe_train saved at step 3 (py/step-00000003), into zoe-from-py/, and
then test_zoe_train_resumed_python_save alone.

What "the same" means: the weights and both Adam moments of the final checkpoints are equal bit
for bit (every tensor of every safetensors file), and each step's loss and gradient norm are
zoe-train's as its metrics print them (%.6f and %.6g, what the file holds). There is no
tolerance: the runs do the same operations in the same order, so anything short of equality is
a difference in what the Python layer fed the library (a batch, a learning rate, a step).
"""
from __future__ import annotations

import glob
import json
import os
import re

import numpy as np
import pytest
from safetensors.numpy import load_file

import zoe

REF = os.environ.get("ZOE_TEST_REF", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The run, as keyword arguments; run_trainer_tests.py gives zoe-train the same as flags.
RUN = dict(model="demo", data=os.path.join(ROOT, "data", "demo-corpus.txt"), steps=6,
           dpu_warmup=2, seed=7, progress="lines", lr=3e-3)


def comm_world():
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD


def world_size() -> int:
    comm = comm_world()
    return 1 if comm is None else comm.Get_size()


needs_ref = pytest.mark.skipif(not REF, reason="ZOE_TEST_REF unset: run_trainer_tests.py "
                               "trains zoe-train's reference first")


def train_steps(trainer: zoe.Trainer, first: int, last: int, save_at: dict[int, str]):
    """zoe-train's loop (tools/zoe-train): each step's micro-batches from the loader, their
    counted targets declared, then the step at the schedule's learning rate."""
    cfg = trainer.config
    loader = zoe.Dataset(RUN["data"]).loader(
        seq_len=trainer.seq_len, micro_batch=trainer.micro_batch_size,
        grad_accum=trainer.grad_accum, dp_size=trainer.dp_size, dp_rank=trainer.dp_rank,
        seed=int(cfg["seed"]), vocab_size=trainer.vocab)
    stats = []
    for step in range(first, last):
        batches = [loader.fetch(step, m) for m in range(trainer.grad_accum)]
        trainer.begin_step(sum(zoe.count_targets(y) for _, y in batches))
        for x, y in batches:
            trainer.micro_batch(x, y)
        stats.append(trainer.step(trainer.lr_at(step)))
        if step + 1 in save_at:
            trainer.save(save_at[step + 1])
    return stats


def metrics(path: str, first: int, last: int) -> list[tuple[str, str]]:
    """Steps [first, last) of a metrics file, counted from 0 as StepStats.step is (the file counts
    from 1; a resumed run's holds only its own steps)."""
    lines = [json.loads(line) for line in open(path)]
    return [(f"{m['loss']:.6f}", f"{m['grad_norm']:.6g}") for m in lines
            if first < m["step"] <= last]


def as_printed(stats) -> list[tuple[str, str]]:
    # the metrics file prints a float32 through C's %.6f and %.6g, as Python formats it here
    return [(f"{s.loss:.6f}", f"{s.grad_norm:.6g}") for s in stats]


def assert_same_checkpoint(got: str, want: str) -> None:
    files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(want, "*.safetensors")))
    assert files, f"no safetensors in {want}"
    assert files == sorted(os.path.basename(f)
                           for f in glob.glob(os.path.join(got, "*.safetensors")))
    for name in files:
        a, b = load_file(os.path.join(got, name)), load_file(os.path.join(want, name))
        assert a.keys() == b.keys(), name
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, (name, key)
            assert a[key].tobytes() == b[key].tobytes(), f"{name}: {key} differs"


def rank0_dir(name: str) -> str:
    return os.path.join(REF, name)


@needs_ref
def test_same_run_as_zoe_train():
    """6 steps from scratch with zoe-train's --save (every 3 steps) and --metrics as options:
    zoe-train's losses and norms, in the stats and in the metrics file, its checkpoints (step 3,
    and step 6 saved at finalize) and its final state bit for bit; the step-3 save is the input
    of zoe-train's resume afterwards."""
    outputs = dict(save=rank0_dir("py"), save_every=3, metrics=rank0_dir("py.jsonl"))
    with zoe.Trainer(comm=comm_world(), **RUN, **outputs) as trainer:
        stats = train_steps(trainer, 0, 6, {})
        trainer.finalize()
    assert sorted(os.path.basename(d) for d in glob.glob(rank0_dir("py/step-*"))) == [
        "step-00000003", "step-00000006"]
    assert as_printed(stats) == metrics(rank0_dir("zoe.jsonl"), 0, 6)
    assert metrics(rank0_dir("py.jsonl"), 0, 6) == metrics(rank0_dir("zoe.jsonl"), 0, 6)
    assert [json.loads(line)["step"] for line in open(rank0_dir("py.jsonl"))] == list(range(1, 7))
    assert_same_checkpoint(rank0_dir("py/step-00000006"), rank0_dir("zoe/step-00000006"))


@needs_ref
def test_resume_zoe_train_checkpoint():
    """Loads zoe-train's step-3 checkpoint and trains to 6: its steps 4-6, bit for bit."""
    with zoe.Trainer(comm=comm_world(), **RUN) as trainer:
        assert trainer.load(rank0_dir("zoe")).endswith("step-00000006")  # a directory: newest
        trainer.load(rank0_dir("zoe/step-00000003"))
        assert trainer.steps_done == 3
        stats = train_steps(trainer, 3, 6, {6: rank0_dir("py-from-zoe")})
        trainer.finalize()
    assert as_printed(stats) == metrics(rank0_dir("zoe.jsonl"), 3, 6)
    assert_same_checkpoint(rank0_dir("py-from-zoe/step-00000006"),
                           rank0_dir("zoe/step-00000006"))


@needs_ref
def test_streamed_weights_same_run():
    """offload_params="cpu" (the weights on the host, streamed a layer at a time): zoe-train's
    resident run to the bit, its losses and norms and its final checkpoint."""
    options = dict(RUN, offload_params="cpu", recompute=RUN.get("recompute", False),
                   prefetch_layers=2)
    with zoe.Trainer(comm=comm_world(), **options) as trainer:
        stats = train_steps(trainer, 0, 6, {6: rank0_dir("py-streamed")})
        trainer.finalize()
    assert as_printed(stats) == metrics(rank0_dir("zoe.jsonl"), 0, 6)
    assert_same_checkpoint(rank0_dir("py-streamed/step-00000006"),
                           rank0_dir("zoe/step-00000006"))


@needs_ref
def test_state_on_drives_same_run():
    """offload="nvme" with two drive directories (the optimizer state and, offload_grads="nvme",
    the gradient partition striped over a tmpfs and a disk directory, read one bucket ahead):
    zoe-train's host-state run to the bit, its losses and norms and its final checkpoint."""
    disk = rank0_dir("drive")
    os.makedirs(disk, exist_ok=True)
    options = dict(RUN, offload="nvme", nvme_path=["/dev/shm", disk], nvme_ahead=1,
                   offload_grads="nvme")
    with zoe.Trainer(comm=comm_world(), **options) as trainer:
        stats = train_steps(trainer, 0, 6, {6: rank0_dir("py-drives")})
        trainer.finalize()
    assert as_printed(stats) == metrics(rank0_dir("zoe.jsonl"), 0, 6)
    assert_same_checkpoint(rank0_dir("py-drives/step-00000006"),
                           rank0_dir("zoe/step-00000006"))


@needs_ref
def test_weights_on_drives_same_run():
    """offload_params="nvme" and offload_grads="nvme": the state, the weights and the gradient
    partition on a disk directory, the weights streamed from there (recomputation as in the
    reference run): zoe-train's resident run to the bit."""
    disk = rank0_dir("drive-weights")
    os.makedirs(disk, exist_ok=True)
    options = dict(RUN, offload="nvme", offload_params="nvme", offload_grads="nvme",
                   nvme_path=[disk], recompute=RUN.get("recompute", False))
    with zoe.Trainer(comm=comm_world(), **options) as trainer:
        stats = train_steps(trainer, 0, 6, {6: rank0_dir("py-drive-weights")})
        trainer.finalize()
    assert as_printed(stats) == metrics(rank0_dir("zoe.jsonl"), 0, 6)
    assert_same_checkpoint(rank0_dir("py-drive-weights/step-00000006"),
                           rank0_dir("zoe/step-00000006"))


def test_nvme_path_without_offload_nvme():
    """--nvme-path alone is refused naming it, before anything is built."""
    with pytest.raises(zoe.InvalidArgument, match="--nvme-path=/dev/shm without --offload nvme"):
        zoe.Trainer(comm=comm_world(), model="demo", nvme_path="/dev/shm")


@pytest.mark.skipif(not REF or not os.path.isdir(os.path.join(REF, "zoe-from-py")),
                    reason="run_trainer_tests.py runs this after zoe-train resumed Python's save")
def test_zoe_train_resumed_python_save():
    assert metrics(rank0_dir("zoe-from-py.jsonl"), 3, 6) == metrics(rank0_dir("zoe.jsonl"), 3, 6)
    assert_same_checkpoint(rank0_dir("zoe-from-py/step-00000006"),
                           rank0_dir("zoe/step-00000006"))


# ---- bad input: a zoe.Error naming the problem, never a crash ----

@pytest.fixture(scope="module")
def trainer():
    with zoe.Trainer(comm=comm_world(), model="demo", dpu_warmup=0) as t:
        yield t


def batch(t: zoe.Trainer, dtype=np.int32):
    rng = np.random.default_rng(t.dp_rank)
    return rng.integers(0, t.vocab, (t.micro_batch_size, t.seq_len)).astype(dtype)


def test_options_are_the_flags():
    with pytest.raises(zoe.InvalidArgument, match=r"--micro-batch=0 is out of range") as e:
        zoe.Trainer(comm=comm_world(), micro_batch=0)
    assert e.value.status == 1 and e.value.status_name == "invalid argument"
    with pytest.raises(zoe.InvalidArgument, match=r"unknown option '--no-such-option'"):
        zoe.Trainer(comm=comm_world(), no_such_option=1)
    with pytest.raises(zoe.InvalidArgument, match="tp=3"):
        zoe.Trainer(comm=comm_world(), tp=3)
    assert zoe.train_config(micro_batch=2, recompute=True)["micro-batch"] == 2


def test_numpy_and_torch_batches(trainer):
    torch = pytest.importorskip("torch")
    x = batch(trainer)
    a = trainer.micro_batch(x, x)
    b = trainer.micro_batch(torch.from_numpy(x), torch.from_numpy(x))
    assert a == b  # the same batch and weights: the same forward
    half = np.ones_like(x, dtype=bool)
    half[:, ::2] = False
    assert np.isfinite(trainer.micro_batch(x, x, mask=half))
    s = trainer.step(1e-3)
    assert isinstance(s, zoe.StepStats) and s.step == trainer.steps_done - 1 and s.tokens > 0


def test_bad_batches(trainer):
    x = batch(trainer)
    cases = [
        ((x.astype(np.int64), x), r"tokens: dtype int64, int32 is needed"),
        ((x, x.astype(np.float32)), r"targets: dtype float32"),
        ((x[:, :-1], x), r"tokens: shape \(4, 63\), \(4, 64\) is needed"),
        ((np.asfortranarray(np.tile(x, 1)), x), None),  # (4, 64) F order: not C-contiguous
        ((x.tolist(), x), r"a numpy array or a torch CPU tensor is needed, not list"),
    ]
    for args, message in cases:
        with pytest.raises(zoe.InvalidArgument, match=message or "not C-contiguous"):
            trainer.micro_batch(*args)
    strided = np.zeros((trainer.micro_batch_size, 2 * trainer.seq_len), np.int32)[:, ::2]
    with pytest.raises(zoe.InvalidArgument, match="not C-contiguous"):
        trainer.micro_batch(strided, x)
    y = x.copy()
    y[1, 5] = trainer.vocab
    with pytest.raises(zoe.InvalidArgument,
                       match=rf"target {trainer.vocab} at \[1, 5\] is outside the vocabulary"):
        trainer.micro_batch(x, y)
    x2 = x.copy()
    x2[0, 0] = -3
    with pytest.raises(zoe.InvalidArgument, match=r"token -3 at \[0, 0\] is outside the vocab"):
        trainer.micro_batch(x2, x)
    with pytest.raises(zoe.InvalidArgument, match=r"token -3"):
        trainer.logits(x2)
    with pytest.raises(zoe.InvalidArgument, match="before any micro-batch"):
        trainer.step(1e-3)
    logits = trainer.logits(x)
    assert logits.shape == (trainer.micro_batch_size, trainer.seq_len, trainer.vocab)
    assert np.isfinite(trainer.eval([(x, x)]))


def test_schedule_and_lr_refused(trainer):
    assert trainer.lr_at(0) > 0
    for step, message in ((-5, r"lr_at: step=-5 is out of range \[0, 2147483647\]"),
                          (10**12, r"lr_at: step=1000000000000 is out of range"),
                          (1.5, r"lr_at: step=1.5 is not an integer")):
        with pytest.raises(zoe.InvalidArgument, match=message):
            trainer.lr_at(step)
    x = batch(trainer)
    trainer.micro_batch(x, x)
    for lr in (1e300, -1e-3, float("nan")):
        with pytest.raises(zoe.InvalidArgument, match=re.escape(f"step: lr={lr!r} is not a learning rate")):
            trainer.step(lr)
    trainer.step(1e-3)  # the micro-batch is still there to step on


def test_outputs_refused(tmp_path):
    """An unwritable --metrics or --save is refused at creation with zoe-train's line; nothing is
    built or written. Each rank alone (a split of COMM_WORLD): rank 0 checks for its comm."""
    comm = comm_world()
    sub = comm.Split(comm.Get_rank(), 0) if comm is not None else None
    run = dict(comm=sub, model="demo", dpu_warmup=0)
    try:
        with pytest.raises(zoe.InvalidArgument, match=r"--save: .*'/proc/x'"):
            zoe.Trainer(save="/proc/x", **run)
        with pytest.raises(zoe.IOFailure, match=r"--metrics: cannot write '/proc/x/m.jsonl'"):
            zoe.Trainer(metrics="/proc/x/m.jsonl", **run)
        assert not os.path.exists("/proc/x")
        busy = str(tmp_path / f"ckpt{comm.Get_rank() if comm else 0}")
        with zoe.Trainer(save=busy, **run) as t:
            with pytest.raises(zoe.InvalidArgument, match="in use"):
                zoe.Trainer(save=busy, **run)
            x = batch(t)
            t.micro_batch(x, x)
            t.step(1e-3)
            assert not glob.glob(os.path.join(busy, "step-*"))  # --save-every 0: at the end
            t.finalize()
        assert glob.glob(os.path.join(busy, "step-*")) == [os.path.join(busy, "step-00000001")]
    finally:
        if sub is not None:
            sub.Free()


def test_destroyed_trainer():
    t = zoe.Trainer(comm=comm_world(), model="demo", dpu_warmup=0)
    x = batch(t)
    t.destroy()
    t.destroy()  # a second destroy is a no-op
    for call in (lambda: t.micro_batch(x, x), lambda: t.step(1e-3), t.finalize,
                 lambda: t.save("/nonexistent"), lambda: t.param_count):
        with pytest.raises(zoe.InvalidArgument, match="the trainer was destroyed"):
            call()


def test_sub_communicator():
    """A Trainer on a split of COMM_WORLD: each rank alone here, a 1-rank run."""
    comm = comm_world()
    if comm is None:
        pytest.skip("no mpi4py")
    sub = comm.Split(comm.Get_rank(), 0)
    try:
        with zoe.Trainer(comm=sub, model="demo", dpu_warmup=0) as t:
            assert t.dp_size == 1
            x = batch(t)
            t.micro_batch(x, x)
            assert np.isfinite(t.step(1e-3).loss)
            t.finalize()
    finally:
        sub.Free()


def test_plan_tokenizer_dataset(tmp_path):
    p = zoe.plan(model="demo", ranks=2)
    assert p["fits"] in (True, False) and "host_bytes" in p
    with pytest.raises(zoe.InvalidArgument, match="hardware"):
        zoe.plan(hardware="no-such-box")
    tok = zoe.Tokenizer()  # the byte tokenizer
    ids = tok.encode("zoe")
    assert ids.dtype == np.int32 and list(ids) == [122, 111, 101]
    assert [list(a) for a in tok.encode_batch(["a", b"bc"])] == [[97], [98, 99]]
    assert tok.decode(ids) == "zoe"
    with pytest.raises(zoe.Error, match="outside the vocabulary"):
        tok.decode(np.array([5000], np.int32))
    with pytest.raises(zoe.IOFailure):
        zoe.Tokenizer(str(tmp_path / "missing.json"))
    ds = zoe.Dataset(RUN["data"])
    assert ds.documents > 0 and ds.tokens == sum(len(ds[i]) for i in range(ds.documents))
    with pytest.raises(zoe.Error):
        zoe.Dataset(str(tmp_path / "missing.txt"))


def test_device_memory():
    """``device_memory`` is --device-memory. Each rank trains alone (a split of COMM_WORLD: a
    refusal on one rank must not leave others in a collective): the demo's first step reports
    the device allocator's peak; a cap one byte below it is refused, naming the cap and the
    allocation that passed it; a cap of exactly the peak trains, at the same peak."""
    comm = comm_world()
    if comm is None:
        pytest.skip("no mpi4py")
    sub = comm.Split(comm.Get_rank(), 0)
    run = dict(comm=sub, model="demo", dpu_warmup=0)

    def first_step(trainer):
        x = batch(trainer)
        trainer.micro_batch(x, x)
        s = trainer.step(1e-3)
        trainer.finalize()
        return s

    try:
        with zoe.Trainer(**run) as t:
            peak = first_step(t).device_peak_bytes
        assert peak > 0
        with pytest.raises(zoe.OutOfMemory,
                           match=rf"device memory cap .* \({peak - 1} bytes\): allocating .* for "):
            zoe.Trainer(device_memory=peak - 1, **run)
        with zoe.Trainer(device_memory=str(peak), **run) as t:
            assert first_step(t).device_peak_bytes == peak
        with pytest.raises(zoe.InvalidArgument, match=r"--device-memory: '12XB' is not a size"):
            zoe.Trainer(device_memory="12XB", **run)
    finally:
        sub.Free()
