"""Each cell's step against a hand-written step (docs/method.md §2), and the gate operating point."""

import math

import pytest
import torch

from learnwin.infra.registry import CELLS, MODELS
from learnwin.models.cells import ConstGate, GatedCell, build_model

GATED = [m for m in MODELS if issubclass(CELLS[m].load(), GatedCell)]  # the diagonal linear cells: test_linear_cells.py


def _ln(v):
    return torch.nn.functional.layer_norm(v, v.shape[-1:])  # init LN: unit weight, zero bias


def _sig(v):
    return 1 / (1 + torch.exp(-v))


def _randomise(model):
    """float64 and random weights everywhere except the LayerNorm (kept at its init)."""
    model = model.double()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return model


def _hand_step(name, m, x, h, c):
    """One step written out from docs/method.md §2, with the module's parameters."""
    cell = m.cell
    if name in ("const", "shared", "diag"):
        g = torch.tanh(_ln(x @ cell.W_x.T + cell.b_x + h @ cell.W_h.T))
        if name == "const":
            s = cell.s
        elif name == "shared":
            s = _sig(x @ cell.w_s[0] + cell.b_s + h @ cell.u_s[0])[:, None]
        else:
            s = _sig(x @ cell.W_s.T + cell.b_s + h @ cell.U_s.T)
        return (1 - s) * h + s * g, None
    if name == "gru":
        z = _sig(x @ cell.W_z.T + cell.b_z + h @ cell.U_z.T)
        r = _sig(x @ cell.W_r.T + cell.b_r + h @ cell.U_r.T)
        g = torch.tanh(_ln(x @ cell.W_h.T + cell.b_h + (r * h) @ cell.U_h.T))
        return (1 - z) * h + z * g, None
    i = _sig(x @ cell.W_i.T + cell.b_i + h @ cell.U_i.T)
    f = _sig(x @ cell.W_f.T + cell.b_f + h @ cell.U_f.T)
    o = _sig(x @ cell.W_o.T + cell.b_o + h @ cell.U_o.T)
    g = torch.tanh(_ln(x @ cell.W_g.T + cell.b_g + h @ cell.U_g.T))
    c = f * c + i * g
    return o * torch.tanh(c), c


@pytest.mark.parametrize("name", GATED)
def test_step_matches_hand_computation(name):
    torch.manual_seed(0)
    m = _randomise(build_model(name, 3, 4))
    x = torch.randn(2, 3, 3, dtype=torch.float64)
    hidden, transported = m.cell(x)
    h = c = torch.zeros(2, 4, dtype=torch.float64)
    for t in range(3):
        h, c_new = _hand_step(name, m, x[:, t], h, c)
        c = c_new if c_new is not None else h
        torch.testing.assert_close(hidden[:, t], h, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(transported[:, t], c, rtol=1e-12, atol=1e-12)
    y = m(x)
    torch.testing.assert_close(y, (hidden @ m.W_out.T + m.b_out).squeeze(-1))


@pytest.mark.parametrize("name", ["const", "shared", "diag"])
def test_gates_start_at_the_same_operating_point(name):
    m = build_model(name, 3, 5, const_s=0.05)
    trace = m.cell.trace(torch.randn(4, 6, 3))
    # exact up to float32 rounding of s and of sigmoid(logit(s))
    torch.testing.assert_close(trace.leak, torch.full_like(trace.leak, 0.95), rtol=0, atol=1e-7)


def test_gru_and_lstm_gate_init():
    gru = build_model("gru", 3, 5, gru_init_update=0.05, gate_init="paper")
    lstm = build_model("lstm", 3, 5, lstm_init_forget=0.5, gate_init="paper")
    x = torch.randn(4, 6, 3)
    torch.testing.assert_close(gru.cell.trace(x).leak, torch.full((4, 6, 5), 0.95), rtol=0, atol=1e-7)
    torch.testing.assert_close(lstm.cell.trace(x).leak, torch.full((4, 6, 5), 0.5), rtol=0, atol=1e-7)
    assert float(gru.cell.b_z[0]) == pytest.approx(math.log(0.05 / 0.95))


def test_orthogonal_init_and_zero_biases():
    m = build_model("const", 3, 5)
    w = m.cell.W_h
    torch.testing.assert_close(w @ w.T, torch.eye(5), rtol=0, atol=1e-6)
    assert float(m.W_out.detach().norm()) == pytest.approx(1.0)
    assert torch.count_nonzero(m.cell.b_x) == 0 and float(m.b_out) == 0.0


def test_unknown_model_is_named():
    with pytest.raises(ValueError, match="unknown model 'rnn'"):
        build_model("rnn", 3, 4)


def _orth(rows, cols):
    w = torch.empty(rows, cols)
    torch.nn.init.orthogonal_(w)
    return w


def _unif(rows, cols):
    bound = 1 / math.sqrt(cols)
    return torch.empty(rows, cols).uniform_(-bound, bound)


def _paper_reference(name, D, H):
    """docs/method.md §2's init written out in the constructors' draw order (the pre-gate_init cells)."""
    z = torch.zeros
    ref = {"cell.W_x": _orth(H, D), "cell.b_x": z(H), "cell.W_h": _orth(H, H)} if name in ("shared", "diag") else {}
    if name == "shared":
        ref.update({"cell.w_s": z(1, D), "cell.b_s": torch.full((1,), math.log(0.05 / 0.95)), "cell.u_s": z(1, H)})
    if name == "diag":
        ref.update({"cell.W_s": z(H, D), "cell.b_s": torch.full((H,), math.log(0.05 / 0.95)), "cell.U_s": z(H, H)})
    if name == "gru":
        ref.update({"cell.W_z": z(H, D), "cell.U_z": z(H, H), "cell.b_z": torch.full((H,), math.log(0.05 / 0.95)),
                    "cell.W_r": _unif(H, D), "cell.U_r": _unif(H, H), "cell.b_r": z(H),
                    "cell.W_h": _orth(H, D), "cell.U_h": _orth(H, H), "cell.b_h": z(H)})
    if name == "lstm":
        ref.update({"cell.W_i": _unif(H, D), "cell.U_i": _unif(H, H), "cell.b_i": z(H),
                    "cell.W_f": z(H, D), "cell.U_f": z(H, H), "cell.b_f": z(H),
                    "cell.W_o": _unif(H, D), "cell.U_o": _unif(H, H), "cell.b_o": z(H),
                    "cell.W_g": _orth(H, D), "cell.U_g": _orth(H, H), "cell.b_g": z(H)})
    ref["W_out"] = _orth(1, H)
    return ref


@pytest.mark.parametrize("name", ["shared", "diag", "gru", "lstm"])
def test_paper_gate_init_reproduces_the_reference_draws_bit_for_bit(name):
    torch.manual_seed(7)
    ref = _paper_reference(name, 3, 5)
    torch.manual_seed(7)
    params = dict(build_model(name, 3, 5, gate_init="paper").named_parameters())
    for key, value in ref.items():
        assert torch.equal(params[key].detach(), value.to(params[key].dtype)), key
    torch.manual_seed(7)
    official = dict(build_model(name, 3, 5, gate_init="official").named_parameters())
    assert list(official) == list(params)  # registration (= optimizer) order the same under both inits


GATES = {"gru": ["z", "r", "h"], "lstm": ["i", "f", "o", "g"]}  # h, g: the candidate layer


def _is_orthogonal(w):
    """Orthonormal rows or columns, whichever are fewer (torch.nn.init.orthogonal_'s shape rule)."""
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    return torch.allclose(gram, torch.eye(gram.shape[0]), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_official_gate_init_of_gru_lstm_is_the_official_orth_init(name):
    """--orth_init: every W (H x D) and U (H x H) orthogonal, nn.Linear's uniform(+-1/sqrt(D))
    biases on every input projection (candidate included), no update/forget-gate offset."""
    D, H = 3, 16
    torch.manual_seed(3)
    model = build_model(name, D, H, gate_init="official", gru_init_update=0.2, lstm_init_forget=0.8)
    cell = model.cell
    for gate in GATES[name]:
        W, U, b = (getattr(cell, f"{p}_{gate}").detach() for p in ("W", "U", "b"))
        assert _is_orthogonal(W) and _is_orthogonal(U), gate
        torch.testing.assert_close(U @ U.T, torch.eye(H), rtol=0, atol=1e-5)
        # within nn.Linear's bound: an offset logit(0.2) = -1.39 or logit(0.8) = 1.39 lies outside
        assert float(b.abs().max()) <= 1 / math.sqrt(D), gate
        assert float(b.std()) > 0.1, gate  # drawn, not a constant
    assert _is_orthogonal(model.W_out.detach()) and float(model.b_out) == 0.0
    # so the leak at init is near 1/2 on average (tau ~ 1.4 steps), not the paper's 0.8
    leak = cell.trace(torch.randn(64, 8, D)).leak
    assert 0.4 < float(leak.mean()) < 0.6


@pytest.mark.parametrize("name", ["const", "shared", "diag"])
def test_official_gate_init_leaves_shared_diag_gates_at_zero_like_the_official_code(name):
    """--orth_init skips the Shared/Diag gate layer (_skip_orth): zero weights, bias logit(const_s);
    W_x, W_h and the readout are orthogonal under both inits, so both give the same parameters."""
    torch.manual_seed(5)
    official = dict(build_model(name, 3, 6, gate_init="official", const_s=0.2).named_parameters())
    torch.manual_seed(5)
    paper = dict(build_model(name, 3, 6, gate_init="paper", const_s=0.2).named_parameters())
    assert list(official) == list(paper)
    assert all(torch.equal(official[k], paper[k]) for k in paper)
    if name != "const":
        W, U, b = ((official["cell.w_s"], official["cell.u_s"], official["cell.b_s"]) if name == "shared"
                   else (official["cell.W_s"], official["cell.U_s"], official["cell.b_s"]))
        assert torch.count_nonzero(W) == 0 and torch.count_nonzero(U) == 0
        torch.testing.assert_close(b.detach(), torch.full_like(b, math.log(0.2 / 0.8)), rtol=0, atol=1e-7)
    for key in ("cell.W_x", "cell.W_h", "W_out"):
        assert _is_orthogonal(official[key].detach()), key


def test_unknown_gate_init_is_named():
    with pytest.raises(ValueError, match="model.gate_init = 'orth'"):
        build_model("gru", 3, 4, gate_init="orth")


# -- the registry and a user's cell (docs/method.md §2a) ---------------------------------------


def test_register_rejects_bad_entries_by_name(fresh_registry):
    registry = fresh_registry
    const = "learnwin.models.cells:ConstGate"
    spec = registry.CellSpec(const, 1, "k")
    with pytest.raises(ValueError, match="'Toy/1' must match"):
        registry.register("Toy/1", spec)
    with pytest.raises(TypeError, match="takes a CellSpec, not type"):
        registry.register("toy", ConstGate)
    with pytest.raises(ValueError, match="already registered as learnwin.models.cells:GRU"):
        registry.register("gru", spec)
    with pytest.raises(ValueError, match="expected_class = 'power'; allowed: exponential, power-law-like"):
        registry.CellSpec(const, 1, "k", expected_class="power")
    with pytest.raises(ValueError, match="gate_blocks = -1"):
        registry.CellSpec(const, -1, "k")
    with pytest.raises(ValueError, match=r"CellSpec.cls = <class .*ConstGate'> must be the class's import path"):
        registry.CellSpec(ConstGate, 1, "k")  # a class, not its path: the registry would import torch
    with pytest.raises(ValueError, match="state_per_unit = 0 must be an integer >= 1 or a model config key"):
        registry.CellSpec(const, 1, "k", state_per_unit=0)
    registry.register("gru", registry.CELLS["gru"])  # the same entry again: a module imported twice
    assert list(registry.CELLS) == list(registry.MODELS)
    registry.register("not_a_module", registry.CellSpec("learnwin.models.cells:Trace", 1, "k"))
    with pytest.raises(ValueError, match="cell 'not_a_module': learnwin.models.cells:Trace must be an nn.Module subclass"):
        build_model("not_a_module", 3, 5)


def test_one_registration_reaches_resources_colours_and_claims(fresh_registry):
    """The per-model tables of the other modules are views of the registry: the toy's one entry
    appears in each, and its lack of an expectation leaves it out of the claims' expectations."""
    from learnwin.infra import resources
    from learnwin.plots.style import MODEL_COLORS
    from learnwin.stats import claims

    assert "toy" not in resources.GATES and MODEL_COLORS.get("toy", "k") == "k"
    import toy_cell  # noqa: F401  (registers "toy")

    assert resources.GATES["toy"] == 1 and MODEL_COLORS["toy"] == "tab:brown"
    assert list(MODEL_COLORS) == [*MODELS, "toy"]
    assert "toy" not in claims.EXPECTED_CLASS and "toy" not in claims.EXPECTED_GROWTH
    assert dict(claims.EXPECTED_CLASS)["gru"] == "power-law-like"
    cell = build_model("toy", 3, 5).cell
    assert sum(tuple(p.shape) == (5, 5) for p in cell.parameters()) == resources.GATES["toy"]


def test_toy_cell_through_the_public_interface(fresh_registry):
    """The toy defines only step, the projections and its recurrence: training runs through the
    inherited scan (grads reach every parameter), its trace is its step's, and the exact one-step
    Jacobian (taken of ``step`` via ``state_of``) has the trace's leak + correction on its diagonal."""
    from learnwin.probing import exact_transport as et

    fresh_registry.load_cells("toy_cell")
    model = build_model("toy", 3, 5).double()
    cell = model.cell
    x = torch.randn(2, 7, 3, dtype=torch.float64)
    model(x).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    tr = cell.trace(x)
    torch.testing.assert_close(tr.hidden, cell(x)[0], rtol=0, atol=0)
    torch.testing.assert_close(tr.leak[0, 0], torch.linspace(0.5, 0.9, 5, dtype=torch.float64))
    xp = torch.nn.functional.linear(x, cell.W_x, cell.b_x)
    for k in range(1, 7):
        J = et.autograd_jacobian(cell.state_step, xp[:, k], tr.presynaptic[:, k])
        diag = torch.diagonal(J, dim1=-2, dim2=-1)
        torch.testing.assert_close(diag, tr.leak[:, k] + tr.correction[:, k], rtol=0, atol=1e-12)
        off = J - torch.diag_embed(diag)
        assert off.abs().max() > 1e-3  # W_h couples the units: the check sees the off-diagonal too


def test_a_block_registers_once_under_a_valid_name(fresh_registry):
    """A block entry (docs/method.md §2c): registered again equal does nothing, another spec under
    its name, a bad name, "published" or a non-BlockSpec raise; a bad part raises at the spec."""
    from dataclasses import replace

    registry = fresh_registry
    saved = dict(registry.BLOCKS)
    try:
        registry.register_block("hawk", registry.BLOCKS["hawk"])
        registry.register_block("my_block", replace(registry.BLOCKS["mlp"], mlp="geglu"))
        assert registry.BLOCKS["my_block"].mlp == "geglu"
        with pytest.raises(ValueError, match="block 'hawk' is already registered"):
            registry.register_block("hawk", registry.BLOCKS["mamba"])
        for bad in ("Hawk", "published"):
            with pytest.raises(ValueError, match=f"'{bad}' must match"):
                registry.register_block(bad, registry.BLOCKS["mlp"])
        with pytest.raises(TypeError, match="takes a BlockSpec, not dict"):
            registry.register_block("other", {"norm": "rms"})
        with pytest.raises(ValueError, match="BlockSpec.norm = 'batch'; allowed: layer, rms or None"):
            registry.BlockSpec(norm="batch")
    finally:
        registry.BLOCKS.clear()
        registry.BLOCKS.update(saved)
