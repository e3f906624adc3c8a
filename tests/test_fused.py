"""The fused training step (learnwin.models.fused) against the fast path of learnwin.models.bptt."""

import shutil

import pytest
import torch
from pretend_cuda import Replay

from learnwin.models import bptt, fused
from learnwin.models.cells import build_model

GATED = ["const", "shared", "diag", "gru", "lstm"]
SIZES = {"default": (64, 32, 8, 32), "ragged": (13, 5, 3, 7)}  # T, batch, D, H (default: config/config.yaml)
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}
EAGER = fused.Mode(compile=False, graph=False)


def _model(name, H, D, dtype, layer_norm=True):
    """Every parameter moved off its init (gates not at their constants, LayerNorm affine not 1, 0)."""
    torch.manual_seed(0)
    model = build_model(name, D, H, layer_norm=layer_norm).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def _outputs(model, x, mode):
    """States and the gradients of a loss on both states (the LSTM's c too) w.r.t. x and every parameter."""
    cell = model.cell
    gen = torch.Generator().manual_seed(5)
    wh, wc = torch.randn(2, *x.shape[:2], cell.hidden_size, generator=gen, dtype=x.dtype)
    xr = x.clone().requires_grad_()
    with fused.use(mode):
        h, c = cell(xr)
    ((h * wh).sum() + (c.sin() * wc).sum()).backward()
    out = {"h": h.detach(), "c": c.detach(), "x": xr.grad}
    out.update({n: p.grad for n, p in cell.named_parameters()})
    assert not any(v.is_inference() for v in out.values())  # an optimizer writes grads in place
    cell.zero_grad(set_to_none=True)
    return out


def _assert_equal(fused_out, fast, tol):
    """Equal to ``tol`` on the scale of each tensor: |fused - fast| <= tol max(1, max |fast|) (the
    loss sums B T H terms, so a gradient's entries reach tens at the default size)."""
    assert fused_out.keys() == fast.keys()
    for n, v in fast.items():
        scale = v.abs().max().item()
        assert scale > 1e-4, n  # not a comparison of zeros
        torch.testing.assert_close(fused_out[n], v, rtol=0, atol=tol * max(1.0, scale), msg=n)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", GATED)
def test_fused_step_equals_fast_path(name, size, dtype, monkeypatch):
    """Forward states and every gradient, default and ragged size: 1e-10 (float64), 1e-5 (float32)."""
    T, B, D, H = SIZES[size]
    model = _model(name, H, D, dtype)
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(2), dtype=dtype)
    loops = []
    real = fused.run
    monkeypatch.setattr(fused, "run", lambda loop, *a: loops.append(loop.__name__) or real(loop, *a))
    fused_out = _outputs(model, x, EAGER)
    assert loops == ["forward_loop", "backward_loop"]
    _assert_equal(fused_out, _outputs(model, x, None), TOLERANCE[dtype])
    assert len(loops) == 2  # the fast path ran without the fused loops


@pytest.mark.parametrize("name", GATED)
def test_fused_step_without_layer_norm(name):
    T, B, D, H = SIZES["ragged"]
    model = _model(name, H, D, torch.float64, layer_norm=False)
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    _assert_equal(_outputs(model, x, EAGER), _outputs(model, x, None), 1e-10)


@pytest.mark.skipif(not any(map(shutil.which, ("g++", "c++", "clang++"))),
                    reason="torch.compile's CPU kernels need a C++ compiler; none on PATH")
def test_compiled_step_equals_fast_path():
    """The kernels under torch.compile (inductor's CPU kernels), on one small case: the LSTM,
    the family with the most fused work per step."""
    T, B, D, H = SIZES["ragged"]
    model = _model("lstm", H, D, torch.float32)
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(4))
    compiled = fused.Mode(compile=True, graph=False)
    _assert_equal(_outputs(model, x, compiled), _outputs(model, x, None), 1e-5)


@pytest.mark.parametrize("name", GATED)
def test_every_step_function_traces_whole(name, monkeypatch):
    """Each family's kernels trace as one graph each (fullgraph: no graph break, which would
    fail the compilation on CUDA too), through dynamo and AOT autograd without kernel code
    (``aot_eager``), float64, equal to the fast path to 1e-10."""
    steps = {s: torch.compile(s, fullgraph=True, dynamic=False, backend="aot_eager") for s in fused.STEPS.values()}
    monkeypatch.setattr(fused, "_compiled", steps)
    T, B, D, H = SIZES["ragged"]
    model = _model(name, H, D, torch.float64)
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    _assert_equal(_outputs(model, x, fused.Mode(compile=True, graph=False)), _outputs(model, x, None), 1e-10)


@pytest.mark.parametrize("name", ["const", "gru", "lstm"])
def test_graphed_loops_copy_inputs_in_and_outputs_out(name, monkeypatch):
    """Two forward passes on different inputs before either backward (as in a stack of two layers):
    each pass and gradient equals the fast path's, from one capture per loop."""
    monkeypatch.setattr(fused, "GRAPH_BACKEND", Replay)
    monkeypatch.setattr(fused, "_graphed", {})
    monkeypatch.setattr(Replay, "captures", 0)
    T, B, D, H = SIZES["ragged"]
    model = _model(name, H, D, torch.float64)
    gen = torch.Generator().manual_seed(6)
    xs = [torch.randn(B, T, D, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    w = torch.randn(2, B, T, H, generator=gen, dtype=torch.float64)
    results = {}
    for mode in (fused.Mode(compile=False, graph=True), None):
        with fused.use(mode):
            hs = [model.cell(x)[0] for x in xs]
        grads = [torch.autograd.grad((h * wi).sum(), [x, *model.cell.parameters()]) for h, wi, x in zip(hs, w, xs)]
        results[mode] = hs, grads
    assert Replay.captures == 2  # the forward loop and the backward loop, once each
    for a, b in zip(*results.values()):
        for u, v in zip(a, b):
            torch.testing.assert_close(u, v, rtol=0, atol=1e-10)
    assert len(fused._graphed) == 2
    fused.release()  # every graph dropped: the next pass captures again
    with fused.use(fused.Mode(compile=False, graph=True)):
        torch.autograd.grad((model.cell(xs[0])[0] * w[0]).sum(), xs[0])
    assert Replay.captures == 4 and len(fused._graphed) == 2


def test_cuda_graphs_refuse_cpu_tensors():
    model = _model("gru", 5, 3, torch.float64)
    with fused.use(fused.Mode(compile=False, graph=True)), pytest.raises(ValueError, match="graph=False"):
        model.cell(torch.zeros(2, 3, 3, dtype=torch.float64))


def test_pick_per_device():
    x = torch.zeros(1, 1, 1)
    assert fused.pick(x) is bptt.Scan  # the CPU: bptt's path by default
    assert fused.mode_for(torch.device("cuda")) == fused.Mode(compile=True, graph=True)
    with fused.use(EAGER):
        assert fused.pick(x) is fused.Scan
        with fused.use(None):
            assert fused.pick(x) is bptt.Scan
    assert fused.pick(x) is bptt.Scan


def test_the_environment_switch_turns_the_cuda_default_off(monkeypatch):
    monkeypatch.setenv(fused.ENV, "off")
    assert fused.mode_for(torch.device("cuda")) is None
    with fused.use(EAGER):  # an explicit use() still wins
        assert fused.mode_for(torch.device("cuda")) == EAGER
    monkeypatch.setenv(fused.ENV, "auto")
    assert fused.mode_for(torch.device("cuda")) == fused.Mode(compile=True, graph=True)
    monkeypatch.setenv(fused.ENV, "eager")  # no compilation, the loops still graphed
    assert fused.mode_for(torch.device("cuda")) == fused.Mode(compile=False, graph=True)
    assert fused.mode_for(torch.device("cpu")) is None
    monkeypatch.setenv(fused.ENV, "yes")
    with pytest.raises(ValueError, match="LEARNWIN_FUSED='yes'"):
        fused.mode_for(torch.device("cuda"))


@pytest.fixture
def fresh_compiler(monkeypatch):
    """No kernel compiled yet, no failed compilation: fused's wrappers and dynamo's caches cleared
    (before and after)."""
    monkeypatch.setattr(fused, "_compiled", {})
    monkeypatch.setattr(fused, "_failed", [])
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def no_compiler(gm, example_inputs):
    """A backend failing as inductor does on a machine without a C compiler."""
    raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.\nmore detail")


def no_launcher(gm, example_inputs):
    """A backend whose kernels fail at their first call (as Triton's launcher build does)."""
    def launch(*args):
        raise OSError("Python.h: No such file or directory")
    return launch


@pytest.mark.parametrize("backend,cause", [(no_compiler, "RuntimeError: Failed to find C compiler. Please specify "
                                                          "via CC environment variable."),
                                           (no_launcher, "OSError: Python.h: No such file or directory")],
                         ids=["at-compile", "at-first-call"])
def test_a_failed_compile_falls_back_to_the_graphed_eager_step(backend, cause, fresh_compiler, monkeypatch, caplog):
    """Kernels whose compilation fails: one warning naming the cause, the eager kernels from then on,
    still graphed; the forward and every gradient equal the eager fused step's bit for bit."""
    monkeypatch.setattr(fused, "BACKEND", backend)
    monkeypatch.setattr(fused, "GRAPH_BACKEND", Replay)
    monkeypatch.setattr(fused, "_graphed", {})
    monkeypatch.setattr(Replay, "captures", 0)
    T, B, D, H = SIZES["ragged"]
    model = _model("lstm", H, D, torch.float64)
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    with caplog.at_level("WARNING", logger=fused.__name__):
        fallen = _outputs(model, x, fused.Mode(compile=True, graph=True))
    assert [r.getMessage() for r in caplog.records] == [
        f"fused: torch.compile of forward_kernel failed ({cause}); the eager kernels run instead"]
    assert fused._failed == [cause] and Replay.captures == 2
    eager = _outputs(model, x, EAGER)
    assert all(torch.equal(fallen[n], v) for n, v in eager.items())


def test_a_fault_of_the_kernel_itself_still_raises(fresh_compiler, monkeypatch):
    """Where the eager rerun fails too, its error is the kernel's: raised, no fallback recorded."""
    monkeypatch.setattr(fused, "BACKEND", no_compiler)

    def kernel(a):
        raise ValueError("the kernel's own fault")

    with pytest.raises(ValueError, match="own fault"):
        fused.Compiled(kernel)(torch.zeros(2))
    assert fused._failed == []


def test_out_of_memory_is_named_never_a_failed_compile(fresh_compiler, monkeypatch):
    """A device out of memory while a kernel compiles or runs: torch.OutOfMemoryError raised as
    itself, no eager fallback recorded (a later row would time the eager kernels unsaid)."""
    def no_memory(gm, example_inputs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(fused, "BACKEND", no_memory)
    model = _model("gru", 5, 3, torch.float64)
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        _outputs(model, torch.randn(2, 4, 3, dtype=torch.float64), fused.Mode(compile=True, graph=False))
    assert fused._failed == [] and fused.fallback() is None


@pytest.mark.parametrize("name", GATED)
def test_one_compilation_per_kernel_and_shape(name, fresh_compiler, monkeypatch):
    """Compiled (dynamo with its plain ``eager`` backend: the guards and recompilations are dynamo's),
    each kernel is compiled once per family and shape: two shapes, two cache entries each
    (an aliased zero state at t = 0 would make a second one per shape)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    monkeypatch.setattr(fused, "BACKEND", "eager")
    for n, (T, B, D, H) in enumerate(SIZES.values(), 1):
        _outputs(_model(name, H, D, torch.float64), torch.randn(B, T, D, dtype=torch.float64),
                 fused.Mode(compile=True, graph=False))
        entries = {k.__name__: len(_debug_get_cache_entry_list(k.__code__)) for k in fused.STEPS.values()}
        assert entries == {k: n for k in entries}, (n, entries)
    assert fused._failed == []


def test_compiling_under_the_deterministic_mode_sets_inductor_s(fresh_compiler, monkeypatch):
    """Under torch's deterministic mode (the jobs', learnwin.infra.runtime.deterministic) the kernels
    compile in inductor's deterministic mode (no on-device benchmarking that picks the numerics)."""
    from torch._inductor import config as inductor

    monkeypatch.setattr(inductor, "deterministic", False)
    fused.compiled(fused.forward_kernel)
    assert not inductor.deterministic
    monkeypatch.setattr(fused, "_compiled", {})
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch._C._set_deterministic_algorithms(True)
    try:
        fused.compiled(fused.forward_kernel)
    finally:
        torch._C._set_deterministic_algorithms(deterministic)
    assert inductor.deterministic


@pytest.mark.parametrize("name", GATED)
def test_evaluation_runs_the_fused_forward_where_the_device_has_a_mode(name, monkeypatch):
    """Without autograd (train.evaluate) a device with a fused mode runs the fused forward, equal to
    the step-by-step scan to 1e-10 in float64; without a mode (the CPU's default) it stays the scan."""
    T, B, D, H = SIZES["ragged"]
    model = _model(name, H, D, torch.float64)
    x = torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    calls = []
    for loop, kernel in list(fused.STEPS.items()):
        monkeypatch.setitem(fused.STEPS, loop, lambda *a, _k=kernel: calls.append(_k) or _k(*a))
    with torch.no_grad():
        scan = model(x)
        assert not calls  # the CPU: the scan
        with fused.use(EAGER):
            out = model(x)
    assert calls and all(k.__name__.endswith("forward_kernel") for k in calls)
    torch.testing.assert_close(out, scan, rtol=0, atol=1e-10)
    with torch.enable_grad(), fused.use(EAGER):  # a training forward does not count here: evaluates is False
        assert not fused.evaluates(x)
