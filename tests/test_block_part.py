"""A new block part touches two files (docs/architecture.md, "Where a change goes"): its field and
arithmetic in learnwin/infra/blocks.py and its module in learnwin/models/stack.py.

The test adds one to a copy of the package by editing only those two files: a linear skip from
the block's normed input to its output, o <- o + W_s a (one H x H product per step). A block with
it, registered from a user's module, then runs through a stack's forward pass (against the
closed form of one layer), its one step, the registry's state width, the cost law and the config
check, in a fresh process on the copy."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import yaml
from workflow_helpers import ROOT, SCHEMA

#: The edits, (anchor, text put after it), per file of the package: the part's whole footprint.
PATCHES = {
    "infra/blocks.py": [
        ("    mlp_expand: int = 4\n", "    skip: bool = False\n"),
        ('        block += self.mlp_expand * (3 if self.mlp == "geglu" else 2) if self.mlp else 0\n',
         "        block += int(self.skip)\n"),
    ],
    "models/stack.py": [
        ("        self.gate = nn.Linear(width, W) if spec.gate else None\n",
         "        self.skip = nn.Linear(width, width, bias=False) if spec.skip else None\n"),
        ("            o = self.out_proj(o)\n",
         "        if self.skip is not None:\n            o = o + self.skip(a)\n"),
    ],
}

#: Run on the patched copy: what the test asserts, printed as JSON.
SCRIPT = textwrap.dedent('''
    import json, sys
    import torch, yaml
    from learnwin.infra import config, registry, resources
    from learnwin.models.cells import build_model

    cfg = yaml.safe_load(open(sys.argv[1]))
    config.check(cfg)  # model.block names the block that model.cells_module registers
    torch.manual_seed(0)
    net = build_model("gru", 3, 4, layers=1, block="skipped", cells_module="skip_block").double()
    stack, x = net.cell, torch.randn(2, 7, 3, dtype=torch.float64)
    block = stack.layers[0]
    u = stack.embed(x)
    a = block.norm(u)
    closed = stack.norm(u + block.cell(a)[0] + a @ block.skip.weight.T)  # u' = u + cell(a) + W_s a
    out, z = stack(x)
    two = build_model("gru", 3, 4, layers=2, block="skipped").double().cell
    z2, step = two(x)[1], torch.zeros(2, two.state_width, dtype=torch.float64)
    steps = []
    for t in range(x.shape[1]):
        step = two.state_step(x[:, t], step)
        steps.append(step)
    model = {**cfg["model"], "layers": 2, "hidden": 4}
    spec = registry.CELLS["gru"]
    cost = {name: resources.mixing({**cfg, "model": {**model, "block": name}}, "gru") for name in ("skipped", "rms")}
    try:
        config.check({**cfg, "model": {**cfg["model"], "block": "skiped"}})
        refused = ""
    except config.ConfigError as err:
        refused = str(err)
    print(json.dumps(dict(
        forward=(out - closed).abs().max().item(), skip=(block.skip.weight.abs().sum().item()),
        step=(torch.stack(steps, 1) - z2).abs().max().item(),
        width=[spec.state_width(model | {"block": "skipped"}), two.state_width], cost=cost, refused=refused)))
''')


def patched_copy(tmp_path):
    """A copy of learnwin with :data:`PATCHES` applied (each anchor found exactly once), a user's
    module registering the block, and the smoke config (schema defaults filled) naming it."""
    copy = shutil.copytree(ROOT / "learnwin", tmp_path / "learnwin", ignore=shutil.ignore_patterns("__pycache__"))
    for name, edits in PATCHES.items():
        text = (copy / name).read_text()
        for anchor, added in edits:
            assert text.count(anchor) == 1, f"learnwin/{name}: anchor {anchor!r} not found once"
            text = text.replace(anchor, anchor + added)
        (copy / name).write_text(text)
    (tmp_path / "skip_block.py").write_text(
        "from learnwin import BlockSpec, register_block\n\n"
        'register_block("skipped", BlockSpec(norm="rms", skip=True, cite="a test\'s part"))\n'
        'register_block("rms", BlockSpec(norm="rms", cite="the same block without it"))\n')
    from snakemake.utils import validate

    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg["models"], cfg["model"]["cells_module"], cfg["model"]["block"] = ["gru"], "skip_block", "skipped"
    validate(cfg, str(SCHEMA), set_default=True)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path


def test_a_new_block_part_in_two_files_runs_through_a_stack_and_the_config_check(tmp_path):
    root = patched_copy(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(root)}
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(root / "cfg.yaml")], env=env, cwd=root,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["skip"] > 0 and got["forward"] < 1e-12  # the part is in the forward pass, as its closed form
    assert got["step"] < 1e-12  # one step z_{t-1} -> z_t, layer by layer, is the forward pass's
    assert got["width"][0] == got["width"][1] == 2 * 4  # the registry's n is the built stack's
    assert got["cost"]["skipped"] - got["cost"]["rms"] == 2  # one H x H product per layer, from blocks.py
    assert "model.block = 'skiped'" in got["refused"] and "skipped" in got["refused"]
