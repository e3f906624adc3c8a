"""A pretend CUDA device for the CPU build of torch: device mismatches fail here as they do on a GPU.

Under :func:`pretend_cuda`, a tensor made on ``cuda`` (a factory's ``device=``, ``.to("cuda")``,
``.cuda()``, ``torch.load(map_location="cuda")``) is a :class:`PretendCuda`: a wrapper whose
``device`` is ``cuda:0`` around a real CPU tensor, so every value is computed by the CPU kernels,
bit for bit as on the CPU. Every operation checks the devices of its tensor arguments by CUDA's
rules and raises, as CUDA does, where a CPU tensor meets a pretend one: a CPU tensor may join only
as a 0-dim scalar, as an index of ``aten.index``/``index_put``, or as the source of a copy. Under
torch's strict deterministic mode an op that CUDA refuses there (a float cumsum, ...) raises too.
``.numpy()`` of a pretend tensor fails (its device is not the CPU); ``.cpu()`` returns the plain
CPU tensor. ``torch.save`` stores pretend tensors as CPU ones (a CUDA checkpoint loaded with
``map_location``). :class:`Replay` stands in for CUDA graphs (learnwin.models.fused.GRAPH_BACKEND).

Chosen over ``torch._subclasses.fake_tensor.FakeTensorMode``, which on this build does make
``device="cuda"`` tensors and raises ``FakeTensorDeviceMismatchError`` on a mix, but holds no
values: ``.item()``, ``.nonzero()`` and every numpy conversion fail, and a real tensor cannot be
moved into it, so no stage can run to its tables there.
"""

from __future__ import annotations

import contextlib
import functools
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

CUDA = torch.device("meta")
aten = torch.ops.aten

#: Ops whose tensor index arguments may stay on the CPU when ``self`` is on CUDA (advanced indexing).
_INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
#: Ops that copy across devices.
_COPY_OPS = {aten.copy_.default, aten._foreach_copy_.default, aten._foreach_copy.default}


class DeviceMismatch(RuntimeError):
    """A CPU tensor met a pretend CUDA one where CUDA raises."""


class Nondeterministic(RuntimeError):
    """An op without a deterministic CUDA kernel under torch's strict deterministic mode, where CUDA raises."""


def _any(func, args, kwargs) -> bool:
    return True


def _float_sums(func, args, kwargs) -> bool:
    dtype = kwargs.get("dtype") or (args[2] if len(args) > 2 and args[2] is not None else args[0].dtype)
    return dtype.is_floating_point or dtype.is_complex


#: Ops that CUDA refuses under ``torch.use_deterministic_algorithms(True)`` (its documented list, less
#: the pooling, padding, upsampling and sampling backward ops no stage of learnwin reaches), each with
#: the condition of the refusal.
_NONDETERMINISTIC = {
    aten.cumsum: _float_sums, aten.cumsum_: _float_sums,
    aten.put: _any, aten.put_: _any, aten.histc: _any,
    aten.bincount: lambda f, a, k: (a[1] if len(a) > 1 else k.get("weights")) is not None,
    aten.median: lambda f, a, k: f._overloadname != "default",  # with indices
    aten.nanmedian: lambda f, a, k: f._overloadname != "default",
    aten.scatter_reduce: lambda f, a, k: (a[4] if len(a) > 4 else k["reduce"]) == "prod",
    aten.scatter_reduce_: lambda f, a, k: (a[4] if len(a) > 4 else k["reduce"]) == "prod",
    aten.nll_loss_forward: _any, aten.nll_loss2d_forward: _any,
}


class PretendCuda(torch.Tensor):
    """A CPU tensor ``inner`` that says it lives on ``cuda:0``."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, strides=inner.stride(), storage_offset=inner.storage_offset(), dtype=inner.dtype,
            layout=inner.layout, device=CUDA, requires_grad=inner.requires_grad,
            storage_size=inner.untyped_storage().nbytes())

    def __init__(self, inner: torch.Tensor):
        self.inner = inner

    @classmethod
    def of(cls, inner: torch.Tensor) -> PretendCuda:
        """The wrapper of ``inner``, an inference tensor where ``inner`` is one (a view of a normal
        tensor made in inference mode is a normal one, whose version counter autograd then sets)."""
        with torch.inference_mode(inner.is_inference()):
            out = cls(inner)
        torch._C._set_conj(out, inner.is_conj())  # complex autograd reads the lazy conj/neg bits
        torch._C._set_neg(out, inner.is_neg())
        return out

    def __repr__(self, *, tensor_contents=None):
        return f"PretendCuda({self.inner!r})"

    def tolist(self):  # CUDA copies to the host
        return self.inner.tolist()

    def numpy(self, *, force=False):
        raise TypeError(f"can't convert {CUDA} device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                        "to host memory first.")

    def __reduce_ex__(self, protocol):  # torch.save: stored as the CPU tensor
        return self.inner.detach().__reduce_ex__(protocol)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


def _is_cuda(device) -> bool:
    return device is not None and torch.device(device).type == CUDA.type


def _on_device(t: torch.Tensor) -> bool:
    """A pretend one, or a zero tensor that autograd made for one: the tangent of an input without one
    in a forward-AD formula, ``_efficientzerotensor`` on the pretend device, whose Meta kernel makes a
    plain meta tensor without data."""
    return isinstance(t, PretendCuda) or t.device == CUDA


def _cpu(t: torch.Tensor) -> torch.Tensor:
    """The CPU tensor behind ``t`` (:func:`_on_device`)."""
    if isinstance(t, PretendCuda):
        return t.inner
    return torch.zeros(t.shape, dtype=t.dtype)


def _check(func, args, kwargs) -> None:
    """Raise :class:`DeviceMismatch` where CUDA would: a CPU tensor of dim > 0 with a pretend one."""
    if func in _COPY_OPS:
        return
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    if func in _INDEX_OPS:  # indices may be CPU tensors; self and the values may not differ
        tensors = [args[0]] + ([args[2]] if len(args) > 2 and isinstance(args[2], torch.Tensor) else [])
    cpu = [tuple(t.shape) for t in tensors if not _on_device(t) and t.dim() > 0]
    if cpu and any(_on_device(t) for t in tensors):
        raise DeviceMismatch(f"Expected all tensors to be on the same device, but found at least two devices, "
                             f"{CUDA} and cpu! (in {func}: cpu tensors of shapes {cpu})")


def _check_deterministic(func, args, kwargs) -> None:
    """Raise :class:`Nondeterministic` where CUDA would: a pretend tensor in an op of
    :data:`_NONDETERMINISTIC` under torch's strict deterministic mode."""
    refuse = _NONDETERMINISTIC.get(func.overloadpacket)
    if (refuse is None or not torch.are_deterministic_algorithms_enabled()
            or torch.is_deterministic_algorithms_warn_only_enabled()):
        return
    if any(_on_device(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)) and refuse(
            func, args, kwargs):
        raise Nondeterministic(f"{func} does not have a deterministic implementation on {CUDA}, but you set "
                               "'torch.use_deterministic_algorithms(True)'")


def _dispatch(func, args, kwargs):
    if func is aten._to_copy.default:  # .to(device), .cuda(), .cpu()
        target = kwargs.get("device")
        to_device = _is_cuda(target) or (target is None and _on_device(args[0]))
        out = func(_cpu(args[0]) if _on_device(args[0]) else args[0], **{**kwargs, "device": torch.device("cpu")})
        return PretendCuda.of(out) if to_device else out
    factory = _is_cuda(kwargs.get("device"))
    if factory:
        kwargs = {**kwargs, "device": torch.device("cpu")}
        if func is aten._efficientzerotensor.default:  # its CPU form has no data: CPU kernels reject it
            return PretendCuda.of(torch.zeros(args[0], dtype=kwargs.get("dtype")))
    _check(func, args, kwargs)
    _check_deterministic(func, args, kwargs)
    wrapped = {}

    def unwrap(t):
        if not isinstance(t, torch.Tensor) or not _on_device(t):
            return t
        inner = _cpu(t)
        wrapped[id(inner)] = t
        return inner

    out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
    if not (factory or wrapped):
        return out

    def wrap(t):
        if not isinstance(t, torch.Tensor):
            return t
        return wrapped[id(t)] if id(t) in wrapped else PretendCuda.of(t)  # an in-place op returns its argument

    return tree_map(wrap, out)


class _Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


def _load(load):
    @functools.wraps(load)
    def wrapped(*args, map_location=None, **kwargs):
        if not _is_cuda(map_location if not callable(map_location) else None):
            return load(*args, map_location=map_location, **kwargs)
        state = load(*args, map_location="cpu", **kwargs)
        return tree_map(lambda t: t.to(CUDA) if isinstance(t, torch.Tensor) else t, state)

    return wrapped


def _from_data(make):
    """``torch.tensor``/``as_tensor`` of Python or numpy data on the device: made on the CPU, then
    moved (made on the device directly, the data never reaches a kernel the mode sees)."""
    @functools.wraps(make)
    def wrapped(data, *args, device=None, **kwargs):
        if not _is_cuda(device):
            return make(data, *args, device=device, **kwargs)
        return make(data, *args, **kwargs).to(CUDA)

    return wrapped


@contextlib.contextmanager
def pretend_cuda():
    """Within: ``cuda`` tensors are :class:`PretendCuda` and mixing them with CPU ones raises."""
    saved = torch.load, torch.cuda._lazy_init, torch.tensor, torch.as_tensor
    torch.load = _load(torch.load)
    torch.cuda._lazy_init = lambda: None  # what torch calls before a factory's device="cuda"
    torch.tensor, torch.as_tensor = _from_data(torch.tensor), _from_data(torch.as_tensor)
    try:
        with _Mode():
            yield
    finally:
        torch.load, torch.cuda._lazy_init, torch.tensor, torch.as_tensor = saved


class Replay:
    """A CPU stand-in for CUDA graphs (``learnwin.models.fused.GRAPH_BACKEND``) with their semantics:
    the capture runs ``fn`` once on the static arguments, all on one device as a graph's are, its
    outputs made in the pool that ``pool()`` gives; a replay reruns it on them and writes the results into the
    captured outputs. ``captures`` counts them; :meth:`live` counts the graphs still held and the
    bytes of their outputs in each pool (what CUDA's pools hold beside the graphs' scratch)."""

    captures = 0
    pools = 0  # pools made
    held: list = []  # (pool, weak reference to the replay, weak references to its outputs) per capture

    @classmethod
    def pool(cls) -> int:
        cls.pools += 1
        return cls.pools

    @classmethod
    def capture(cls, fn, args, pool):
        where = {a.device.type for a in args if isinstance(a, torch.Tensor)}
        if len(where) != 1:
            raise DeviceMismatch(f"a graph's tensors on one device, got {sorted(where)}")
        cls.captures += 1
        outs = fn(*args)

        def replay():
            for o, new in zip(outs, fn(*args)):
                if o is not None:
                    o.copy_(new)

        cls.held.append((pool(), weakref.ref(replay), [weakref.ref(o) for o in outs if o is not None]))
        return outs, replay

    @classmethod
    def live(cls) -> tuple[int, dict]:
        """(graphs still held, {pool: bytes of those graphs' outputs still alive})."""
        graphs, pools = 0, {}
        for pool, replay, outs in cls.held:
            graphs += replay() is not None
            alive = [o() for o in outs if o() is not None]
            if alive:
                pools[pool] = pools.get(pool, 0) + sum(o.numel() * o.element_size() for o in alive)
        return graphs, pools
