"""zoe.torch.HostAdam: zoe's fused host Adam/AdamW as a ``torch.optim.Optimizer``.

The drop-in for ``deepspeed.ops.adam.DeepSpeedCPUAdam`` (the same arguments), for parameters in
host memory (plain or pinned CPU tensors): each step is one pass per parameter tensor through
``zoe_adam_step_state`` (include/zoe/adam.h), the kernel of zoe's ZeRO-Offload host step, on the
best SIMD path this CPU has (AVX-512 BF16, AVX-512, AVX2 or scalar, bit-identical results) over
OpenMP threads, with the GIL released. Nothing is compiled at import.

The state's dtypes are zoe-train's flags (docs/offload.md, "Compressed state"):
``main_params_dtype`` (the master weights: "fp32" or "bf16"), ``exp_avg_dtype`` and
``exp_avg_sq_dtype`` (the moments: "fp32", "bf16" or "int8", blockwise with a scale per 256
elements). The defaults are DeepSpeedCPUAdam's: an fp32 master for 16-bit parameters and fp32
moments (``fp32_optimizer_states=False`` makes the moments of 16-bit parameters bf16, as
DeepSpeed keeps them in the parameter's dtype). An fp32 master of a 16-bit parameter is kept in
the state (``state["master_param"]``) and the parameter written as its rounding (to nearest even)
in the same pass; a bf16 master of a bf16 parameter is the parameter itself, updated in place
(no copy: 2 bytes a parameter where torch.optim.AdamW keeps none and rounds to nearest). A bf16
master and second moment round stochastically, int8 moments are 8-bit Adam's blockwise codes.

``state_dict`` holds ``step``, ``exp_avg`` and ``exp_avg_sq`` as ``torch.optim.AdamW`` does (plus
``master_param`` for a separate master), so a state dict of either optimizer loads into the
other; the state dtypes are options of the param groups, saved and loaded with them (a torch
AdamW state dict, which has none, takes this optimizer's, each saved moment and master converted
to it). int8 moments are codes
(``exp_avg`` int8, ``exp_avg_sq`` uint8) with ``exp_avg_scale`` and ``exp_avg_sq_scale``: such a
state dict loads into a HostAdam with the same int8 moments only.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from . import _zoe
from .errors import InvalidArgument, Unsupported

_DTYPES = {torch.float32: _zoe.F32, torch.bfloat16: _zoe.BF16, torch.float16: _zoe.F16}
# zoe-train's state dtype names: (zoe dtype, the torch dtype that holds it)
_STATE = {"fp32": (_zoe.F32, torch.float32), "bf16": (_zoe.BF16, torch.bfloat16),
          "int8": (_zoe.I8, None)}
_INT8_BLOCK = 256
_MOMENTS = ("exp_avg", "exp_avg_sq")
# HostAdam's options in a param group beyond torch AdamW's: a state dict without them (torch's)
# keeps this optimizer's
_GROUP_KEYS = ("adamw_mode", "fp32_optimizer_states", "main_params_dtype", "exp_avg_dtype",
               "exp_avg_sq_dtype")


def _state_dtype(name: str, value: Any, choices: tuple[str, ...]) -> str | None:
    if value is None or value in choices:
        return value
    raise InvalidArgument(f"HostAdam: {name}={value!r} is not one of {', '.join(choices)}")


def _check_tensor(t: torch.Tensor, what: str) -> int:
    """The zoe dtype of a tensor zoe may read and write through its address."""
    if t.device.type != "cpu":
        raise InvalidArgument(f"HostAdam: {what} is on {t.device}; host (CPU or pinned) "
                              "tensors only")
    if t.is_sparse:
        raise Unsupported(f"HostAdam: {what} is sparse")
    if t.dtype not in _DTYPES:
        raise InvalidArgument(f"HostAdam: {what} has dtype {t.dtype}; float32, bfloat16 or "
                              "float16 only")
    if not t.is_contiguous():
        raise InvalidArgument(f"HostAdam: {what} is not contiguous")
    return _DTYPES[t.dtype]


class HostAdam(torch.optim.Optimizer):
    """Adam/AdamW on host parameters through zoe's fused SIMD kernel.

    Arguments as ``DeepSpeedCPUAdam``: ``adamw_mode=True`` is AdamW (decoupled weight decay,
    ``torch.optim.AdamW``), False is Adam with L2 (``torch.optim.Adam``). ``weight_decay``
    defaults to 0, as DeepSpeedCPUAdam's and torch.optim.Adam's, where ``torch.optim.AdamW``'s is
    0.01: pass ``weight_decay=0.01`` for AdamW's default. ``threads``: OpenMP threads per step
    (None: OpenMP's default, ``OMP_NUM_THREADS``). ``bias_correction=False`` and ``amsgrad=True``
    are not implemented (:class:`zoe.Unsupported`).

    The state's dtypes, as zoe-train's flags: ``main_params_dtype`` "fp32" or "bf16" (None:
    fp32), ``exp_avg_dtype`` and ``exp_avg_sq_dtype`` "fp32", "bf16" or "int8" (None: fp32, or
    bf16 for a 16-bit parameter with ``fp32_optimizer_states=False``). ``seed`` keys the
    stochastic rounding of bf16 and int8 state (each parameter tensor its own stream).
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, adamw_mode: bool = True,
                 fp32_optimizer_states: bool = True, *, threads: int | None = None,
                 main_params_dtype: str | None = None, exp_avg_dtype: str | None = None,
                 exp_avg_sq_dtype: str | None = None, seed: int = 0) -> None:
        if not bias_correction:
            raise Unsupported("HostAdam: bias_correction=False is not implemented")
        if amsgrad:
            raise Unsupported("HostAdam: amsgrad is not implemented")
        if threads is not None and threads < 1:
            raise InvalidArgument(f"HostAdam: threads={threads} is not >= 1")
        if not 0 <= seed < 2**64:
            raise InvalidArgument(f"HostAdam: seed={seed} is not in [0, 2^64)")
        self.threads = threads or 0
        self.seed = int(seed)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        adamw_mode=adamw_mode, bias_correction=True, amsgrad=False,
                        fp32_optimizer_states=bool(fp32_optimizer_states),
                        main_params_dtype=_state_dtype("main_params_dtype", main_params_dtype,
                                                       ("fp32", "bf16")),
                        exp_avg_dtype=_state_dtype("exp_avg_dtype", exp_avg_dtype,
                                                   ("fp32", "bf16", "int8")),
                        exp_avg_sq_dtype=_state_dtype("exp_avg_sq_dtype", exp_avg_sq_dtype,
                                                      ("fp32", "bf16", "int8")))
        super().__init__(params, defaults)

    @staticmethod
    def _dtypes(group: dict[str, Any], p: torch.Tensor) -> dict[str, str]:
        """The state dtype names of parameter p in group, the defaults resolved."""
        sixteen = p.dtype != torch.float32
        moment = "bf16" if sixteen and not group.get("fp32_optimizer_states", True) else "fp32"
        return {"master_param": group.get("main_params_dtype") or "fp32",
                "exp_avg": group.get("exp_avg_dtype") or moment,
                "exp_avg_sq": group.get("exp_avg_sq_dtype") or moment}

    @staticmethod
    def _master_is_param(p: torch.Tensor, master: str) -> bool:
        return _STATE[master][1] == p.dtype

    def _state_of(self, group: dict[str, Any], p: torch.Tensor) -> dict[str, Any]:
        state = self.state[p]
        dtypes = self._dtypes(group, p)
        if not state:
            state["step"] = torch.tensor(0.0)  # as torch.optim.AdamW keeps it
            for key in _MOMENTS:
                held = _STATE[dtypes[key]][1]
                if held is None:  # int8 codes (m signed, v unsigned) and a scale per block
                    held = torch.int8 if key == "exp_avg" else torch.uint8
                    state[key + "_scale"] = torch.zeros(-(-p.numel() // _INT8_BLOCK))
                state[key] = torch.zeros(p.shape, dtype=held)
        if not self._master_is_param(p, dtypes["master_param"]) and "master_param" not in state:
            state["master_param"] = p.detach().to(_STATE[dtypes["master_param"]][1], copy=True)
        return state

    def _tensor_seed(self, index: int) -> int:
        """A seed of its own for the index-th parameter tensor (in param_groups' order)."""
        return (self.seed ^ ((index + 1) * 0x9E3779B97F4A7C15)) % 2**64

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adam/AdamW step over every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = -1
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                param_dtype = _check_tensor(p, "a parameter")
                grad_dtype = _check_tensor(p.grad, "a gradient")
                if p.grad.numel() != p.numel():
                    raise InvalidArgument(f"HostAdam: a gradient of {p.grad.numel()} elements "
                                          f"for a parameter of {p.numel()}")
                dtypes = self._dtypes(group, p)
                state = self._state_of(group, p)
                state["step"] += 1
                master = state.get("master_param", p)
                scales = {key: state[key + "_scale"].data_ptr() if key + "_scale" in state else 0
                          for key in _MOMENTS}
                _zoe.adam_step(
                    master=master.data_ptr(), exp_avg=state["exp_avg"].data_ptr(),
                    exp_avg_sq=state["exp_avg_sq"].data_ptr(), grad=p.grad.data_ptr(),
                    grad_dtype=grad_dtype, param=0 if master is p else p.data_ptr(),
                    param_dtype=param_dtype, n=p.numel(), lr=float(group["lr"]), beta1=beta1,
                    beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
                    decoupled=bool(group["adamw_mode"]), grad_scale=1.0,
                    step=int(state["step"].item()), threads=self.threads,
                    master_dtype=_STATE[dtypes["master_param"]][0],
                    exp_avg_dtype=_STATE[dtypes["exp_avg"]][0],
                    exp_avg_sq_dtype=_STATE[dtypes["exp_avg_sq"]][0],
                    exp_avg_scale=scales["exp_avg"], exp_avg_sq_scale=scales["exp_avg_sq"],
                    seed=self._tensor_seed(index))
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's load (which takes the saved groups' options, the state dtypes among them;
        a torch AdamW state dict has none and keeps this optimizer's), then each saved moment and
        master as a copy in the group's dtype (torch casts them to the parameter's); a master
        missing from a torch AdamW state dict starts as the parameter's value. int8 moments load
        only as int8 (codes and scales)."""
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        saved = {i: {k: v for k, v in state_dict["state"].get(i, {}).items()
                     if isinstance(v, torch.Tensor)} for i in saved_ids}
        mine = [{k: g[k] for k in _GROUP_KEYS} for g in self.param_groups]
        super().load_state_dict(state_dict)
        for group, own in zip(self.param_groups, mine):
            for key, value in own.items():  # a torch AdamW state dict has none of these
                group.setdefault(key, value)
        params = [(g, p) for g in self.param_groups for p in g["params"]]
        for i, (group, p) in zip(saved_ids, params):
            if not self.state.get(p):
                continue
            dtypes = self._dtypes(group, p)
            state = self.state[p]
            for key in ("master_param",) + _MOMENTS:
                value = saved[i].get(key)
                if value is None:
                    state.pop(key, None)
                    continue
                int8 = dtypes[key] == "int8"
                if int8 != (value.dtype in (torch.int8, torch.uint8)):
                    raise Unsupported(f"HostAdam: a saved {key} of dtype {value.dtype} into "
                                      f"{dtypes[key]} state: int8 moments load only as int8")
                held = value.dtype if int8 else _STATE[dtypes[key]][1]
                state[key] = value.detach().to("cpu", held, copy=True).contiguous().view_as(p)
                if int8:
                    state[key + "_scale"] = saved[i][key + "_scale"].detach().to(
                        "cpu", torch.float32, copy=True).contiguous()
            if self._master_is_param(p, dtypes["master_param"]):
                state.pop("master_param", None)
            self._state_of(group, p)
