"""zoe.torch.HostAdam: zoe's fused host Adam/AdamW as a ``torch.optim.Optimizer``.

The drop-in for ``deepspeed.ops.adam.DeepSpeedCPUAdam`` (the same arguments), for parameters in
host memory (plain or pinned CPU tensors): each step is one pass per parameter tensor through
``zoe_adam_step`` (include/zoe/adam.h), the kernel of zoe's ZeRO-Offload host step, on the best
SIMD path this CPU has (AVX-512 BF16, AVX-512, AVX2 or scalar, bit-identical results) over
OpenMP threads, with the GIL released. Nothing is compiled at import.

fp32 parameters are updated in place. bf16 and fp16 parameters keep an fp32 master copy in the
optimizer state (``state["master_param"]``) that the step updates, writing the parameter as its
rounding (to nearest even) in the same pass: mixed-precision training's master weights. The
moments are fp32 for every parameter dtype. ``state_dict`` holds ``step``, ``exp_avg`` and
``exp_avg_sq`` as ``torch.optim.AdamW`` does (plus ``master_param`` for 16-bit parameters), so a
state dict of either optimizer loads into the other; loading keeps the moments and the master
in fp32 where torch would cast them to the parameter's dtype.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from . import _zoe
from .errors import InvalidArgument, Unsupported

_DTYPES = {torch.float32: _zoe.F32, torch.bfloat16: _zoe.BF16, torch.float16: _zoe.F16}
_FP32_STATE = ("exp_avg", "exp_avg_sq", "master_param")


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
    ``torch.optim.AdamW``), False is Adam with L2 (``torch.optim.Adam``). ``threads``: OpenMP
    threads per step (None: OpenMP's default, ``OMP_NUM_THREADS``). ``bias_correction=False``
    and ``amsgrad=True`` are not implemented (:class:`zoe.Unsupported`); 16-bit parameters always
    keep fp32 moments (``fp32_optimizer_states`` is accepted for compatibility).
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, adamw_mode: bool = True,
                 fp32_optimizer_states: bool = True, *, threads: int | None = None) -> None:
        if not bias_correction:
            raise Unsupported("HostAdam: bias_correction=False is not implemented")
        if amsgrad:
            raise Unsupported("HostAdam: amsgrad is not implemented")
        if threads is not None and threads < 1:
            raise InvalidArgument(f"HostAdam: threads={threads} is not >= 1")
        self.threads = threads or 0
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        adamw_mode=adamw_mode, bias_correction=True, amsgrad=False)
        super().__init__(params, defaults)

    def _state_of(self, p: torch.Tensor) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)  # as torch.optim.AdamW keeps it
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32,
                                                memory_format=torch.contiguous_format)
            state["exp_avg_sq"] = torch.zeros_like(state["exp_avg"])
        if p.dtype != torch.float32 and "master_param" not in state:
            state["master_param"] = p.detach().to(torch.float32, copy=True)
        return state

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adam/AdamW step over every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                param_dtype = _check_tensor(p, "a parameter")
                grad_dtype = _check_tensor(p.grad, "a gradient")
                if p.grad.numel() != p.numel():
                    raise InvalidArgument(f"HostAdam: a gradient of {p.grad.numel()} elements "
                                          f"for a parameter of {p.numel()}")
                state = self._state_of(p)
                state["step"] += 1
                master = state.get("master_param", p)
                _zoe.adam_step(
                    master=master.data_ptr(), exp_avg=state["exp_avg"].data_ptr(),
                    exp_avg_sq=state["exp_avg_sq"].data_ptr(), grad=p.grad.data_ptr(),
                    grad_dtype=grad_dtype, param=0 if master is p else p.data_ptr(),
                    param_dtype=param_dtype, n=p.numel(), lr=float(group["lr"]), beta1=beta1,
                    beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
                    decoupled=bool(group["adamw_mode"]), grad_scale=1.0,
                    step=int(state["step"].item()), threads=self.threads)
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's load, then the moments and master weights as fp32 copies of the saved
        values (torch casts them to the parameter's dtype); a master missing from a torch
        AdamW state dict starts as the parameter's value."""
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        fp32 = {i: {k: v for k, v in state_dict["state"].get(i, {}).items() if k in _FP32_STATE}
                for i in saved_ids}
        super().load_state_dict(state_dict)
        params = [p for g in self.param_groups for p in g["params"]]
        for i, p in zip(saved_ids, params):
            if not self.state.get(p):
                continue
            for key, value in fp32[i].items():
                self.state[p][key] = value.detach().to("cpu", torch.float32, copy=True) \
                    .contiguous().view_as(p)
            self._state_of(p)
        for group in self.param_groups:  # a torch AdamW state dict has no adamw_mode
            group.setdefault("adamw_mode", True)
