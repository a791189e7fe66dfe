"""zoe.torch.HostAdam against torch.optim.AdamW / Adam, and DeepSpeedCPUAdam where it exists.

Each case draws weights and 20 steps of gradients for two parameter groups (10007 and 333
elements: every vector width leaves a tail; gradient scales spread over e^(+-3) per element;
the groups with their own lr and weight decay) and steps both optimizers. The hyper-parameters
are fp32 values (zoe's are fp32; test_adam_torch.py explains why torch gets the same ones).

Tolerances: those of test_adam_torch.py (fp32_tolerances: m within 1e-5 max|g|, v 1e-5
relative, w 20 (4u |w| + 1e-4 lr)), derived there for 20 steps of the same operations in
another order; HostAdam is that kernel. For bf16 parameters the fp32 master is compared with
torch's fp32 weights under the same tolerance (both step from the same bf16 gradients, widened),
and the bf16 parameter must be the master rounded to nearest even, exactly. Compressed state
(bf16 master, bf16 or int8 moments) has its own tolerances, derived where it is tested.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_adam_torch import fp32_tolerances  # noqa: E402

import zoe  # noqa: E402
from zoe.torch import HostAdam  # noqa: E402

STEPS = 20
SIZES = (10007, 333)
F32 = lambda x: float(np.float32(x))  # noqa: E731
GROUPS = [dict(lr=F32(1e-2), weight_decay=F32(0.1)), dict(lr=F32(3e-3), weight_decay=0.0)]
BETAS, EPS = (F32(0.9), F32(0.999)), F32(1e-8)


def draw(seed: int, dtype=torch.float32):
    rng = np.random.default_rng(seed)
    w0 = [(0.5 * rng.uniform(-1, 1, n)).astype(np.float32) for n in SIZES]
    grads = [[(rng.normal(0, 1, n) * np.exp(rng.uniform(-3, 3, n))).astype(np.float32)
              for n in SIZES] for _ in range(STEPS)]
    if dtype != torch.float32:  # the gradients a 16-bit model has: give torch the same values
        grads = [[torch.from_numpy(g).to(dtype).float().numpy() for g in gs] for gs in grads]
        w0 = [torch.from_numpy(w).to(dtype).float().numpy() for w in w0]
    return w0, grads


def run(make, w0, grads, dtype=torch.float32, steps=STEPS):
    params = [torch.nn.Parameter(torch.from_numpy(w.copy()).to(dtype)) for w in w0]
    opt = make([dict(params=[p], **g) for p, g in zip(params, GROUPS)])
    for gs in grads[:steps]:
        for p, g in zip(params, gs):
            p.grad = torch.from_numpy(g.copy()).to(dtype)
        opt.step()
    return params, opt


def torch_adamw(groups):
    return torch.optim.AdamW(groups, betas=BETAS, eps=EPS, foreach=False)


def host_adamw(groups, **kw):
    return HostAdam(groups, betas=BETAS, eps=EPS, **kw)


def assert_close(name, w, m, v, tw, tm, tv, grads, lr):
    tol = fp32_tolerances(np.stack(grads), lr, tw, tv)
    for key, z, t in (("w", w, tw), ("m", m, tm), ("v", v, tv)):
        err = np.abs(z.astype(np.float64) - t.astype(np.float64))
        i = int(np.argmax(err / tol[key]))
        assert np.all(np.isfinite(z)) and err[i] <= tol[key][i], (
            f"{name}: {key}[{i}] zoe {z[i]!r} torch {t[i]!r}, error {err[i]:.3g} over "
            f"{tol[key][i]:.3g}")


def compare(name, zp, zopt, tp, topt, grads):
    for k, (p, q) in enumerate(zip(zp, tp)):
        zs, ts = zopt.state[p], topt.state[q]
        master = zs.get("master_param", p).detach().float().numpy()
        assert_close(f"{name}, group {k}", master, zs["exp_avg"].numpy(),
                     zs["exp_avg_sq"].numpy(), q.detach().numpy(), ts["exp_avg"].numpy(),
                     ts["exp_avg_sq"].numpy(), [g[k] for g in grads], GROUPS[k]["lr"])
        assert float(zs["step"]) == float(ts["step"])


def test_adamw_fp32():
    w0, grads = draw(1)
    compare("AdamW fp32", *run(host_adamw, w0, grads), *run(torch_adamw, w0, grads), grads)


def test_adam_l2_fp32():
    w0, grads = draw(2)
    zoe_run = run(lambda g: host_adamw(g, adamw_mode=False), w0, grads)
    torch_run = run(lambda g: torch.optim.Adam(g, betas=BETAS, eps=EPS, foreach=False), w0, grads)
    compare("Adam L2 fp32", *zoe_run, *torch_run, grads)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_parameters(dtype):
    w0, grads = draw(3, dtype)
    zp, zopt = run(host_adamw, w0, grads, dtype)
    compare(f"{dtype} master", zp, zopt, *run(torch_adamw, w0, grads), grads)
    for p in zp:
        state = zopt.state[p]
        assert p.dtype == dtype and state["master_param"].dtype == torch.float32
        assert state["exp_avg"].dtype == torch.float32
        assert torch.equal(p.detach(), state["master_param"].to(dtype))  # nearest even


# ---- compressed state: zoe-train's --main-params-dtype, --exp-avg-dtype, --exp-avg-sq-dtype ----

STATES = [dict(main_params_dtype="bf16", exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"),
          dict(main_params_dtype="bf16", exp_avg_dtype="int8", exp_avg_sq_dtype="int8"),
          dict(main_params_dtype="fp32", exp_avg_dtype="bf16", exp_avg_sq_dtype="int8")]
HELD = {"fp32": {torch.float32}, "bf16": {torch.bfloat16}, "int8": {torch.int8, torch.uint8}}


@pytest.mark.parametrize("dtypes", STATES, ids=lambda d: "-".join(d.values()))
def test_compressed_state_unbiased(dtypes):
    """bf16 parameters, 20 steps at lr 1e-4, far under half a bf16 unit of the weights (|w| in
    [0.1, 0.5]: a unit is 2^-10..2^-8, 1e-3..4e-3): rounded to nearest, almost no weight would
    move. zoe rounds the master (and v) stochastically, so each weight's expected move is
    torch's fp32 AdamW's. Measured as the mean over the 10007 elements of zoe's move projected
    on the sign of torch's, over the mean of torch's |move|: 1 when unbiased, 0 when nothing
    moves. The rounding noise is at most sqrt(20) units per element, 4.5e-3 / sqrt(10007) =
    4.5e-5 on the mean against a mean move of about 1e-3: the ratio is 1 within 0.05 (0.1 for
    int8 moments, whose codes' error moves each update by up to a few percent: 1/127^2 of the
    block's absmax for m near zero, within the square law's relative 2/127 elsewhere)."""
    rng = np.random.default_rng(11)
    w0 = torch.from_numpy(rng.choice([-1, 1], SIZES[0]) * rng.uniform(0.1, 0.5, SIZES[0]))
    w0 = w0.to(torch.bfloat16)
    grads = [torch.from_numpy(rng.normal(0, 1, SIZES[0])).to(torch.bfloat16)
             for _ in range(STEPS)]
    zp = torch.nn.Parameter(w0.clone())
    tp = torch.nn.Parameter(w0.float())
    zopt = HostAdam([zp], lr=1e-4, betas=BETAS, eps=EPS, **dtypes)
    topt = torch.optim.AdamW([tp], lr=1e-4, betas=BETAS, eps=EPS, weight_decay=0.0,
                             foreach=False)
    for g in grads:
        zp.grad, tp.grad = g.clone(), g.float()
        zopt.step()
        topt.step()
    state = zopt.state[zp]
    for key, name in (("exp_avg", "exp_avg_dtype"), ("exp_avg_sq", "exp_avg_sq_dtype")):
        assert state[key].dtype in HELD[dtypes[name]], key
        assert (key + "_scale" in state) == (dtypes[name] == "int8")
    # a bf16 master of a bf16 parameter is the parameter itself
    assert ("master_param" in state) == (dtypes["main_params_dtype"] == "fp32")
    master = state.get("master_param", zp).detach().double()
    want = (tp.detach() - w0.float()).double()
    got = master - w0.double()
    ratio = float((got * want.sign()).mean() / want.abs().mean())
    assert abs(ratio - 1) <= (0.1 if "int8" in dtypes.values() else 0.05), ratio
    assert int((zp.detach() != w0).sum()) > SIZES[0] // 10  # weights moved (nearest: ~none)


@pytest.mark.parametrize("dtypes", STATES, ids=lambda d: "-".join(d.values()))
def test_compressed_state_close_to_torch(dtypes):
    """At lr 1e-2 (updates of several bf16 units) the master stays within the rounding's reach of
    torch's fp32 AdamW: per element, 20 steps of one bf16 unit of |w| (stochastic rounding moves
    a value by less than a unit) plus, for the moments' rounding, 10 % of the largest total
    move, 20 lr, with bf16 moments (2^-8 relative each), half of it with int8 ones (the
    gradients' scales spread over e^(+-3): an element 400 times below its block's largest has
    its sqrt(v) at the lowest codes, within a code of sqrt(s)/255 of its value, which damps or
    swells its update by up to half), plus test_adam_torch's fp32 tolerance."""
    w0, grads = draw(12, torch.bfloat16)
    zp, zopt = run(lambda g: host_adamw(g, **dtypes), w0, grads, torch.bfloat16)
    tp, topt = run(torch_adamw, w0, grads)
    for k, (p, q) in enumerate(zip(zp, tp)):
        master = zopt.state[p].get("master_param", p).detach().double().numpy()
        want = q.detach().double().numpy()
        lr = GROUPS[k]["lr"]
        tol = fp32_tolerances(np.stack([g[k] for g in grads]), lr, want,
                              topt.state[q]["exp_avg_sq"].numpy())["w"]
        moments = 0.5 if "int8" in dtypes.values() else 0.1
        tol = tol + STEPS * 2.0**-8 * np.abs(want) + moments * STEPS * lr
        err = np.abs(master - want)
        i = int(np.argmax(err / tol))
        assert err[i] <= tol[i], f"group {k}: w[{i}] zoe {master[i]} torch {want[i]}"


@pytest.mark.parametrize("dtypes", STATES, ids=lambda d: "-".join(d.values()))
def test_compressed_state_dict_resumes_bit_for_bit(dtypes):
    """10 steps, the state dict into a fresh HostAdam with the same dtypes, 10 more: the run of
    20 steps to the bit (the rounding is keyed by seed, tensor and step, not by a generator's
    state); threads 1 and 2 alike."""
    w0, grads = draw(13, torch.bfloat16)
    whole, _ = run(lambda g: host_adamw(g, threads=2, **dtypes), w0, grads, torch.bfloat16)
    params, opt = run(lambda g: host_adamw(g, threads=1, **dtypes), w0, grads, torch.bfloat16,
                      steps=10)
    resumed = host_adamw([dict(params=[p], **g) for p, g in zip(params, GROUPS)], **dtypes)
    resumed.load_state_dict(opt.state_dict())
    for gs in grads[10:]:
        for p, g in zip(params, gs):
            p.grad = torch.from_numpy(g.copy()).to(torch.bfloat16)
        resumed.step()
    assert all(torch.equal(a, b) for a, b in zip(whole, params))


def test_fp32_optimizer_states_false():
    """DeepSpeed's flag: the moments of a bf16 parameter in bf16; an fp32 parameter's in fp32."""
    p16 = torch.nn.Parameter(torch.rand(300).to(torch.bfloat16))
    p32 = torch.nn.Parameter(torch.rand(300))
    p16.grad, p32.grad = torch.rand(300).to(torch.bfloat16), torch.rand(300)
    opt = HostAdam([p16, p32], fp32_optimizer_states=False)
    opt.step()
    assert opt.state[p16]["exp_avg"].dtype == torch.bfloat16
    assert opt.state[p16]["master_param"].dtype == torch.float32
    assert opt.state[p32]["exp_avg_sq"].dtype == torch.float32


def test_threads_bit_identical():
    w0, grads = draw(4)
    one, _ = run(lambda g: host_adamw(g, threads=1), w0, grads, steps=3)
    two, _ = run(lambda g: host_adamw(g, threads=2), w0, grads, steps=3)
    assert all(torch.equal(a, b) for a, b in zip(one, two))


def test_state_dict_both_ways():
    """10 steps in one optimizer, its state_dict loaded into the other, 10 more: as 20 steps of
    torch's alone, within the same tolerances."""
    w0, grads = draw(5)
    tp, topt = run(torch_adamw, w0, grads)
    for first, second in ((host_adamw, torch_adamw), (torch_adamw, host_adamw)):
        params, opt = run(first, w0, grads, steps=10)
        resumed = second([dict(params=[p], **g) for p, g in zip(params, GROUPS)])
        resumed.load_state_dict(opt.state_dict())
        for gs in grads[10:]:
            for p, g in zip(params, gs):
                p.grad = torch.from_numpy(g.copy())
            resumed.step()
        compare(f"{first.__name__} then {second.__name__}", params, resumed, tp, topt, grads)


def test_state_dict_keeps_fp32_master():
    w0, grads = draw(6, torch.bfloat16)
    zp, zopt = run(host_adamw, w0, grads, torch.bfloat16, steps=3)
    fresh = host_adamw([dict(params=[p], **g) for p, g in zip(zp, GROUPS)])
    fresh.load_state_dict(zopt.state_dict())
    for p in zp:
        for key in ("master_param", "exp_avg", "exp_avg_sq"):
            assert fresh.state[p][key].dtype == torch.float32
            assert torch.equal(fresh.state[p][key], zopt.state[p][key]), key


def test_bad_input():
    with pytest.raises(zoe.Unsupported, match="amsgrad"):
        HostAdam([torch.nn.Parameter(torch.zeros(3))], amsgrad=True)
    with pytest.raises(zoe.Unsupported, match="bias_correction"):
        HostAdam([torch.nn.Parameter(torch.zeros(3))], bias_correction=False)
    p = torch.nn.Parameter(torch.zeros(4, 6).t())  # a transposed view: not contiguous
    p.grad = torch.ones(6, 4)
    with pytest.raises(zoe.InvalidArgument, match="not contiguous"):
        HostAdam([p]).step()
    q = torch.nn.Parameter(torch.zeros(8, dtype=torch.float64))
    q.grad = torch.ones(8, dtype=torch.float64)
    with pytest.raises(zoe.InvalidArgument, match="float64"):
        HostAdam([q]).step()
    r = torch.nn.Parameter(torch.zeros(8))
    r.grad = torch.ones(8)
    with pytest.raises(zoe.InvalidArgument, match=r"betas \(0.9, 1\)"):
        HostAdam([r], betas=(0.9, 1.0)).step()
    with pytest.raises(zoe.InvalidArgument,
                       match="main_params_dtype='int8' is not one of fp32, bf16"):
        HostAdam([r], main_params_dtype="int8")
    with pytest.raises(zoe.InvalidArgument, match="exp_avg_dtype='fp16' is not one of"):
        HostAdam([r], exp_avg_dtype="fp16")
    int8 = HostAdam([r], exp_avg_dtype="int8")
    int8.step()
    loaded = HostAdam([r])  # the saved groups' dtypes come with the state dict, as their lr
    loaded.load_state_dict(int8.state_dict())
    assert loaded.state[r]["exp_avg"].dtype == torch.int8
    plain = int8.state_dict()
    del plain["param_groups"][0]["exp_avg_dtype"]  # int8 codes where fp32 is configured
    with pytest.raises(zoe.Unsupported, match="int8 moments load only as int8"):
        HostAdam([r]).load_state_dict(plain)


def deepspeed_cpu_adam():
    """DeepSpeedCPUAdam, or the reason it cannot run here."""
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except Exception as e:  # not installed, or its import fails without CUDA
        return None, f"deepspeed is not importable ({type(e).__name__}: {e})"
    try:
        DeepSpeedCPUAdam([torch.nn.Parameter(torch.zeros(4))])  # builds its op (JIT) here
    except Exception as e:
        return None, f"DeepSpeedCPUAdam's CPU op did not build ({type(e).__name__}: {e})"
    return DeepSpeedCPUAdam, ""


def test_against_deepspeed_cpu_adam():
    """DeepSpeed's CPU Adam does the same step with another order of operations: the same
    tolerances. (bench/host_adam.py compares speed against its kernel built from the sdist.)"""
    ds, reason = deepspeed_cpu_adam()
    if ds is None:
        pytest.skip(reason)
    w0, grads = draw(7)
    ds_run = run(lambda g: ds(g, betas=BETAS, eps=EPS, adamw_mode=True), w0, grads)
    compare("DeepSpeedCPUAdam", *run(host_adamw, w0, grads), *ds_run, grads)
