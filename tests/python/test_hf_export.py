"""zoe-ckpt export --hf gives back the imported model's config, through save, resume and a
reshard, and transformers generates with it: it stops at the model's own eos.

Run under mpiexec -np 2 (ctest: python_hf_export) with ZOE_CKPT naming zoe-ckpt. A tiny
LlamaForCausalLM (transformers builds it here, offline) has what a Llama 3 fine-tune has and
zoe's defaults would get wrong: bos 1 and eos 2 (not vocab - 1), max_position_embeddings 256
(the training --seq-len is 16), Llama 3's rope_scaling, an untied head, and keys zoe does not read
(pad_token_id, use_cache). zoe trains it from Python at TP=2 on a periodic sequence whose period
ends in eos (1 5 6 7 8 9 2), saves at step 20, resumes at TP=1 x DP=2 (a reshard) to step 40 and
saves (its --init-from a copy whose config.json says otherwise); the export of that checkpoint must carry every key of the imported config, and greedy
generation from [1, 5, 6] must be [1, 5, 6, 7, 8, 9, 2] and stop there (with eos read as
vocab - 1 = 15 it would run to max_new_tokens). A model zoe initialised itself exports no token
ids at all.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import zoe

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
MPI = pytest.importorskip("mpi4py.MPI")
COMM = MPI.COMM_WORLD
CKPT_TOOL = os.environ.get("ZOE_CKPT", "")

PERIOD = [1, 5, 6, 7, 8, 9, 2]
SEQ_LEN, MICRO = 16, 4
HF = dict(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
          rope_theta=500000.0, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0,
          tie_word_embeddings=False, use_cache=True,
          rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})


@pytest.fixture(scope="module")
def work():
    """A directory every rank sees (rank 0 makes it)."""
    path = tempfile.mkdtemp(prefix="zoe_hf_export_") if COMM.Get_rank() == 0 else None
    path = COMM.bcast(path, root=0)
    yield path
    COMM.Barrier()
    if COMM.Get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)


def periodic_batch(step: int):
    """Rows of the period at shifted phases: tokens and their next tokens."""
    seq = np.array(PERIOD * 8, np.int32)
    rows = [seq[(step + r) % len(PERIOD):][:SEQ_LEN + 1] for r in range(MICRO)]
    rows = np.stack(rows)
    return np.ascontiguousarray(rows[:, :-1]), np.ascontiguousarray(rows[:, 1:])


def train(trainer: zoe.Trainer, last: int) -> None:
    """Steps to `last`, each on the MICRO rows of periodic_batch split over the DP ranks."""
    mb, first = trainer.micro_batch_size, trainer.dp_rank * trainer.micro_batch_size
    for step in range(trainer.steps_done, last):
        tokens, targets = (np.ascontiguousarray(a[first:first + mb]) for a in periodic_batch(step))
        trainer.micro_batch(tokens, targets)
        trainer.step(1e-2)
    trainer.finalize()


def export(ckpt: str, out: str) -> dict:
    subprocess.run([CKPT_TOOL, "export", "--hf", out, ckpt], check=True, capture_output=True)
    with open(os.path.join(out, "config.json")) as f:
        return json.load(f)


@pytest.mark.skipif(not CKPT_TOOL, reason="ZOE_CKPT (zoe-ckpt) is not given")
def test_imported_config_survives_to_generation(work):
    hf_in, ckpt = os.path.join(work, "hf-in"), os.path.join(work, "ckpt")
    if COMM.Get_rank() == 0:
        torch.manual_seed(0)
        config = transformers.LlamaConfig(**HF)
        transformers.LlamaForCausalLM(config).save_pretrained(hf_in)
    COMM.Barrier()
    with open(os.path.join(hf_in, "config.json")) as f:
        imported = json.load(f)
    run = dict(init_from=hf_in, seq_len=SEQ_LEN, micro_batch=MICRO, dpu_warmup=0, seed=3)
    with zoe.Trainer(comm=COMM, tp=2, save=ckpt, **run) as trainer:
        train(trainer, 20)
    # The resumed run names a copy of the model whose config.json now says eos 3: the
    # checkpoint's record of the model it trains wins (zoe-train needs --init-from again for
    # the shape, rope scaling included).
    moved = os.path.join(work, "hf-moved")
    if COMM.Get_rank() == 0:
        shutil.copytree(hf_in, moved)
        with open(os.path.join(moved, "config.json"), "w") as f:
            json.dump(dict(imported, eos_token_id=3), f)
    COMM.Barrier()
    resumed = dict(run, init_from=moved, micro_batch=MICRO // COMM.Get_size())  # the same batch
    with zoe.Trainer(comm=COMM, tp=1, resume=ckpt, save=ckpt, **resumed) as trainer:
        assert trainer.steps_done == 20
        train(trainer, 40)
    if COMM.Get_rank() != 0:
        return
    out = os.path.join(work, "hf-out")
    exported = export(os.path.join(ckpt, "step-00000040"), out)
    for key, value in imported.items():
        if key not in ("dtype", "torch_dtype", "transformers_version"):
            assert exported.get(key) == value, key
    assert exported["max_position_embeddings"] == 256 and exported["eos_token_id"] == 2
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert model.config.rope_scaling["rope_type"] == "llama3"
    assert model.generation_config.eos_token_id == 2 and model.generation_config.bos_token_id == 1
    prompt = torch.tensor([PERIOD[:3]])
    with torch.no_grad():
        got = model.generate(prompt, max_new_tokens=20, do_sample=False)
    assert got[0].tolist() == PERIOD


@pytest.mark.skipif(not CKPT_TOOL, reason="ZOE_CKPT (zoe-ckpt) is not given")
def test_zoe_initialised_model_exports_no_token_ids(work):
    ckpt = os.path.join(work, "own")
    with zoe.Trainer(comm=COMM, model="llama-demo", save=ckpt, dpu_warmup=0) as trainer:
        rng = np.random.default_rng(1)
        x = rng.integers(0, trainer.vocab, (trainer.micro_batch_size, trainer.seq_len))
        x = x.astype(np.int32)
        trainer.micro_batch(x, x)
        trainer.step(1e-3)
        trainer.finalize()
        seq_len = trainer.seq_len
    if COMM.Get_rank() != 0:
        return
    exported = export(os.path.join(ckpt, "step-00000001"), os.path.join(work, "own-out"))
    assert "bos_token_id" not in exported and "eos_token_id" not in exported
    assert exported["max_position_embeddings"] == seq_len
