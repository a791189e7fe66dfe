#!/usr/bin/env python3
"""zoe's host Adam (kernels/adam.h) against torch.optim.AdamW and torch.optim.Adam, and its
compressed state (kernels/adam_state.h, bf16 with stochastic rounding) against torch's optimizer
on state held the same way (check_state_case says how and with which tolerances).

usage: test_adam_torch.py HELPER   (HELPER: tests/offload/adam_torch_helper)

Each case draws initial weights and 20 steps of gradients (10007 parameters: every vector
width leaves a tail; gradient scales spread over e^(+-3) per element), runs them through zoe's
host Adam in the helper (on every path this CPU has, which must agree bit for bit) and through
torch's optimizer in fp32 (foreach=False, its reference loop), and compares the final weights
and moments.

Tolerances, fp32 (unit roundoff u = 2^-24), for T = 20 steps of the same operations in another
order (torch: lerp for m, addcmul for v, a division by sqrt(bias correction) for the
denominator; zoe: fused multiply-adds and a multiplication by its inverse):
  m: each step differs by a few u of max(|m|, (1 - beta1)|g|); summed over T steps,
     T * 8u * max|g| < 1e-5 * max|g|  (max over the steps, per element)
  v: positive, no cancellation: 1e-5 relative
  w: each step differs by a few u of |w| and by the moments' error carried into the update
     (at most lr * 1e-5 * max|g| / sqrt(v_hat), bounded here by lr * 1e-4); summed over T steps,
     T * (4u * |w| + 1e-4 * lr)
The observed errors are below a tenth of these. Broken on purpose in the helper, a bias
correction one step late failed them 300 times over, a weight decay 10 % short 50 times.

Exits 77 (skipped) without torch and numpy, except under CI=true, where it fails.
"""
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"test_adam_torch: no numpy/torch in {sys.executable} ({e}); scripts/test creates "
          "the environment in build/venv")
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

HEADER = struct.Struct("<4sIQII6fIIQ")  # adam_torch_header in tests/offload/adam_torch_helper.c
U = 2.0**-24


def run_zoe(helper, w0, grads, *, decoupled, grad_bf16, lr, betas, eps, weight_decay,
            grad_scale, state_bf16=False, seed=0):
    steps, n = grads.shape
    with tempfile.TemporaryDirectory(prefix="zoe_adam_torch_") as tmp:
        src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
        with open(src, "wb") as f:
            f.write(HEADER.pack(b"ZADM", steps, n, int(decoupled), int(grad_bf16), lr, betas[0],
                                betas[1], eps, weight_decay, grad_scale, int(state_bf16), 0,
                                seed))
            f.write(w0.astype("<f4").tobytes())
            f.write(grads.astype("<f4").tobytes())
        subprocess.run([helper, src, dst], check=True)
        out = np.fromfile(dst, dtype="<f4")
    assert out.size == 3 * n, f"helper wrote {out.size} floats, want {3 * n}"
    return out[:n], out[n:2 * n], out[2 * n:]


def run_torch(w0, grads, *, decoupled, lr, betas, eps, weight_decay):
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = kind([p], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False)
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        opt.step()
    state = opt.state[p]
    return (p.detach().numpy(), state["exp_avg"].numpy(), state["exp_avg_sq"].numpy())


M32 = 0xFFFFFFFF


def hash32(x):
    """kernels/adam_state.h's zoe_hash32, on numpy uint32 arrays or Python ints."""
    if isinstance(x, int):
        x &= M32
        x ^= x >> 16
        x = (x * 0x7FEB352D) & M32
        x ^= x >> 15
        x = (x * 0x846CA68B) & M32
        return x ^ (x >> 16)
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def sr_key(seed, step, hi=0):
    """zoe_sr_key: the key of one step's rounding."""
    k = hash32(seed >> 32)
    k = hash32((seed & M32) ^ k)
    k = hash32(k ^ (step & M32))
    k = hash32(k ^ (step >> 32) ^ 0x9E3779B9)
    return hash32(k ^ hi)


def sr_random(key, n):
    """zoe_sr_random(key, i) for the elements i < n: 32 random bits each."""
    return hash32(np.arange(n, dtype=np.uint32) ^ np.uint32(key))


def sr_bf16(x, bits16):
    """x (fp32 numpy) rounded to bf16 stochastically with 16 random bits per element, widened
    back to fp32: zoe_sr_bf16."""
    with np.errstate(over="ignore"):
        u = x.view(np.uint32)
        out = ((u + bits16) >> np.uint32(16)) << np.uint32(16)
        quiet = ((u >> np.uint32(16)) | np.uint32(0x40)) << np.uint32(16)
        return np.where(np.isnan(x), quiet, out).view(np.float32)


def run_torch_bf16_state(w0, grads, *, decoupled, lr, betas, eps, weight_decay, seed):
    """torch.optim.AdamW (or Adam) on state held in bf16: each step starts from the widened bf16
    master and moments, takes torch's own fp32 step, and stores the three as kernels/adam_state.h
    does: the master and the second moment with the stochastic rounding of the same random bits
    (low and high 16 of one hash per element), the first moment to nearest even."""
    to_bf16 = lambda a: torch.from_numpy(a).to(torch.bfloat16).float().numpy()
    w, m, v = to_bf16(w0.copy()), np.zeros_like(w0), np.zeros_like(w0)
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    for t, g in enumerate(grads, start=1):
        p = torch.nn.Parameter(torch.from_numpy(w.copy()))
        opt = kind([p], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False)
        p.grad = torch.from_numpy(g.copy())
        if t > 1:
            opt.state[p] = {"step": torch.tensor(float(t - 1)),
                            "exp_avg": torch.from_numpy(m.copy()),
                            "exp_avg_sq": torch.from_numpy(v.copy())}
        opt.step()
        state = opt.state[p]
        r = sr_random(sr_key(seed, t), w.size)
        w = sr_bf16(p.detach().numpy().copy(), r & np.uint32(0xFFFF))
        m = to_bf16(state["exp_avg"].numpy().copy())  # to nearest even
        v = sr_bf16(state["exp_avg_sq"].numpy().copy(), r >> np.uint32(16))
    return w, m, v


def bf16_unit(x):
    """One bf16 unit in the last place at |x| (x != 0), as float64."""
    e = np.frexp(np.abs(x.astype(np.float64)))[1]
    return np.ldexp(1.0, e - 8)


def check_state_case(helper, name, seed, *, decoupled, grad_bf16, weight_decay, n=10007,
                     steps=20, lr=1e-2, betas=(0.9, 0.999), eps=1e-8):
    """bf16 state against the torch reference of the same rounding. The two compute each step's
    fp32 values in other orders (a few fp32 units apart, as above); the stochastic rounding then
    adds the same 16 random bits to both, and only where their difference straddles a bf16
    boundary (about 2^-16 of the roundings) do the stored values part, by one bf16 unit, which
    the moments forget at the rate of beta and the weights keep. So: every element within 3 bf16
    units of torch's (the moments' and weights' carried differences), and at most 0.2 % of the
    elements more than one unit apart (2^-16 of 3 x 20 roundings each is 0.1 %)."""
    rng = np.random.default_rng(seed)
    w0 = (0.5 * rng.uniform(-1, 1, n)).astype(np.float32)
    scale = np.exp(rng.uniform(-3, 3, n))
    grads = (rng.normal(0, 1, (steps, n)) * scale).astype(np.float32)
    if grad_bf16:
        grads = torch.from_numpy(grads).to(torch.bfloat16).float().numpy()
    f32 = lambda x: float(np.float32(x))
    hp = dict(lr=f32(lr), betas=(f32(betas[0]), f32(betas[1])), eps=f32(eps),
              weight_decay=f32(weight_decay))
    sr_seed = 0x5EED0000 + seed
    z = run_zoe(helper, w0, grads, decoupled=decoupled, grad_bf16=grad_bf16, grad_scale=1.0,
                state_bf16=True, seed=sr_seed, **hp)
    t = run_torch_bf16_state(w0, grads, decoupled=decoupled, seed=sr_seed, **hp)
    report = []
    for key, zk, tk in zip("wmv", z, t):
        unit = bf16_unit(np.where(tk == 0, 1e-30, tk))
        diff = np.abs(zk.astype(np.float64) - tk.astype(np.float64)) / unit
        far = float(np.mean(diff > 1.0))
        i = int(np.argmax(diff))
        if not np.all(np.isfinite(zk)) or diff[i] > 3 or far > 0.002:
            print(f"FAIL {name}: {key}[{i}] zoe {zk[i]!r} torch {tk[i]!r} ({diff[i]:.2f} bf16 "
                  f"units); {100 * far:.3f}% of elements more than one unit apart")
            return False
        report.append(f"{key} {100 * float(np.mean(diff > 0)):.2f}% differ, worst {diff[i]:.0f} "
                      f"units")
    # and the weights moved like fp32 state's (the rounding is unbiased): mean gap < 2 % of the
    # mean movement
    tw, _, _ = run_torch(w0, grads, decoupled=decoupled, **hp)
    moved = np.abs(tw - w0).mean()
    gap = np.abs(z[0] - tw).mean()
    if gap > 0.02 * moved + 0.01:  # bf16 holds w to 2^-9 relative (|w| < 0.5: 1e-3 absolute)
        print(f"FAIL {name}: bf16 state ends {gap:.3g} from fp32 state's weights on average "
              f"(they moved {moved:.3g})")
        return False
    print(f"ok {name}: {'; '.join(report)}; mean gap to fp32 state {gap:.2e} "
          f"(moved {moved:.2e})")
    return True


def fp32_tolerances(grads, lr, tw, tv):
    """The fp32 tolerances of the module docstring for T = len(grads) steps, per element, given
    torch's final weights tw and second moment tv (tests/python/test_host_adam.py uses them too)."""
    steps = len(grads)
    gmax = np.abs(grads).max(axis=0).astype(np.float64)
    return {
        "w": steps * (4 * U * np.abs(tw.astype(np.float64)) + 1e-4 * lr),
        "m": 1e-5 * gmax,
        "v": 1e-5 * np.abs(tv.astype(np.float64)),
    }


def check_case(helper, name, seed, *, decoupled, grad_bf16, grad_scale, weight_decay,
               n=10007, steps=20, lr=1e-2, betas=(0.9, 0.999), eps=1e-8):
    rng = np.random.default_rng(seed)
    w0 = (0.5 * rng.uniform(-1, 1, n)).astype(np.float32)
    scale = np.exp(rng.uniform(-3, 3, n))
    grads = (rng.normal(0, 1, (steps, n)) * scale).astype(np.float32)
    if grad_bf16:  # what zoe reads is the bf16 rounding (to nearest even): give torch the same
        grads = torch.from_numpy(grads).to(torch.bfloat16).float().numpy()
    # zoe's hyper-parameters are fp32 and it derives 1 - beta from the fp32 beta; torch derives
    # it in double from what it is given. Given 0.999, their 1 - beta2 would differ by 5e-5
    # relative (1 - fp32(0.999) against fp32(0.001)), so torch gets the fp32 values themselves.
    f32 = lambda x: float(np.float32(x))
    hp = dict(lr=f32(lr), betas=(f32(betas[0]), f32(betas[1])), eps=f32(eps),
              weight_decay=f32(weight_decay))
    zw, zm, zv = run_zoe(helper, w0, grads, decoupled=decoupled, grad_bf16=grad_bf16,
                         grad_scale=grad_scale, **hp)
    tw, tm, tv = run_torch(w0, grads, decoupled=decoupled, **hp)
    tol = fp32_tolerances(grads, lr, tw, tv)
    worst = {}
    for key, z, t in (("w", zw, tw), ("m", zm, tm), ("v", zv, tv)):
        err = np.abs(z.astype(np.float64) - t.astype(np.float64))
        ratio = err / tol[key]
        i = int(np.argmax(ratio))
        worst[key] = ratio[i]
        if not np.all(np.isfinite(z)) or ratio[i] > 1:
            print(f"FAIL {name}: {key}[{i}] zoe {z[i]!r} torch {t[i]!r}, error {err[i]:.3g} "
                  f"over a tolerance of {tol[key][i]:.3g}")
            return False
    moved = np.abs(tw - w0).max()
    print(f"ok {name}: worst error / tolerance w {worst['w']:.3f}, m {worst['m']:.3f}, "
          f"v {worst['v']:.3f} (weights moved up to {moved:.3g})")
    return True


def main():
    if len(sys.argv) != 2:
        print("usage: test_adam_torch.py HELPER", file=sys.stderr)
        return 2
    helper = sys.argv[1]
    cases = [
        # A loss scale of 1024 divided out by the step: exact, a power of two.
        ("AdamW, fp32 gradient, grad_scale 1/1024", 1,
         dict(decoupled=True, grad_bf16=False, grad_scale=1.0 / 1024, weight_decay=0.1)),
        ("AdamW, bf16 gradient", 2,
         dict(decoupled=True, grad_bf16=True, grad_scale=1.0, weight_decay=0.1)),
        ("Adam with L2, fp32 gradient", 3,
         dict(decoupled=False, grad_bf16=False, grad_scale=1.0, weight_decay=0.01)),
    ]
    ok = all([check_case(helper, name, seed, **kw) for name, seed, kw in cases])
    state_cases = [
        ("bf16 state, AdamW, fp32 gradient", 4,
         dict(decoupled=True, grad_bf16=False, weight_decay=0.1)),
        ("bf16 state, Adam with L2, bf16 gradient", 5,
         dict(decoupled=False, grad_bf16=True, weight_decay=0.01)),
    ]
    ok = all([check_state_case(helper, name, seed, **kw) for name, seed, kw in state_cases]) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
