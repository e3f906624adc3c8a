"""config/paper.yaml is the author's replication command, key by key.

The command is that of the official repository's README (github.com/lorenzolivi/learnability,
README.md at 1d07cb5, "Full replication (5 seeds, as in the paper)"), copied below verbatim but
for the two output folders (OUTDIR_*), which no key sets and whose paths the one-path lint keeps
out of code.
Each key of config/paper.yaml that the command sets quotes, in its comment, the README line(s)
that set it; the test reads the config's keys and values and those quotes, checks each quote is a
line of the command, and that the value is the one the quoted flag gives.
"""

import re
from pathlib import Path

import yaml

from learnwin.infra.config import lag_grid

ROOT = Path(__file__).resolve().parents[1]

README_COMMAND = r"""
python launch_multiseed.py \
  --seeds 212,1001,2002,3003,4004 \
  --outdir_baselines OUTDIR_BASELINES \
  --outdir_lstm_gru OUTDIR_LSTM_GRU \
  --common_args "--Nseq_train 8000 --Nseq_diag 8000 --T 1024 --D 16 --H 128 \
    --optimizer adamw --momentum 0.9 --epochs 750 --batch_size 512 --lr 0.001 \
    --weight_decay 0.0001 --grad_clip 1.0 \
    --lag_min 4 --lag_max 256 --num_lags 128 \
    --task_lags 32,64,128,192,256 --task_coeffs 0.6,0.5,0.4,0.32,0.26 \
    --noise_std 0.3 \
    --N_grid 25,50,100,150,200,300,400,600,800,1200,1600,2400,3200,4800,6400,9600,12800 \
    --eps 0.1 --orth_init --layernorm \
    --include_first_order_diag 1 --log_gate_stats 1 --gate_log_every 10 \
    --device cuda \
    --alpha_method ecf" \
  --baseline_extra "--models const,shared,diag --const_s 0.05" \
  --lstm_gru_extra "--models lstm,gru" \
  --w_seed 212 \
  --logdir logs \
  2>&1 | tee logs/launch_multiseed.log
"""

ints = lambda v: [int(x) for x in v.split(",")]  # noqa: E731
floats = lambda v: [float(x) for x in v.split(",")]  # noqa: E731
#: config key -> (README flag, the config value that flag's value gives); the flag's value is a
#: list where the command gives it more than once (--models)
KEYS = {
    "seeds": ("seeds", ints),
    "models": ("models", lambda vs: sorted(m for v in vs for m in v.split(","))),  # as a set: order is ours
    "optimizers": ("optimizer", lambda v: [v]),
    "task.T": ("T", int),
    "task.D": ("D", int),
    "task.lags": ("task_lags", ints),
    "task.coefs": ("task_coeffs", floats),
    "task.noise_std": ("noise_std", float),
    "task.n_train": ("Nseq_train", int),
    "task.n_diag": ("Nseq_diag", int),
    "model.hidden": ("H", int),
    "model.layer_norm": ("layernorm", lambda v: v is None),  # a switch: present = on
    "model.const_s": ("const_s", float),
    "model.gate_init": ("orth_init", lambda v: "official" if v is None else None),  # docs/method.md §2
    "train.epochs": ("epochs", int),
    "train.batch_size": ("batch_size", int),
    "train.grad_clip": ("grad_clip", float),
    "optim.adamw.lr": ("lr", float),
    "optim.adamw.weight_decay": ("weight_decay", float),
    "snapshot.lag_start": ("lag_min", int),
    "snapshot.lag_stop": ("lag_max", int),
    "snapshot.order": ("include_first_order_diag", int),  # the first-order transport factor
    "snapshot.transport": ("include_first_order_diag", lambda v: "diagonal"),  # the first-order *diagonal* one
    "window.eps": ("eps", float),
    "window.N_grid": ("N_grid", ints),
}


def readme_flags(text: str) -> dict[str, object]:
    """Flag -> value (None for a switch; a list where a flag repeats) of the command ``text``."""
    flags: dict[str, object] = {}
    for name, value in re.findall(r"--(\w+)(?:[ \t]+([^\s\\\"-][^\s\\\"]*))?", text):
        value = value or None
        flags[name] = [*flags[name], value] if name == "models" and name in flags else (
            [value] if name == "models" else value)
    return flags


def quoted_keys(text: str) -> dict[str, tuple[object, list[str]]]:
    """Config key (dotted) -> (value, the README segments its comment quotes), from the yaml text."""
    out, parents = {}, []
    for line in text.splitlines():
        m = re.match(r"^( *)([A-Za-z_]\w*):(.*)$", line)
        if not m:
            continue
        depth = len(m[1]) // 2
        parents = parents[:depth] + [m[2]]
        value_part, _, comment = m[3].partition("#")
        if "README: " in comment:
            segments = [s.strip() for s in comment.split("README: ", 1)[1].split(" | ")]
            out[".".join(parents)] = (yaml.safe_load(value_part), segments)
    return out


def test_paper_yaml_is_the_readme_command_key_by_key():
    text = (ROOT / "config" / "paper.yaml").read_text()
    config, quotes = yaml.safe_load(text), quoted_keys(text)
    lines = [line.strip() for line in README_COMMAND.strip().splitlines()]
    flags = readme_flags(README_COMMAND)
    assert set(quotes) == set(KEYS), f"quoted {sorted(quotes)} vs checked {sorted(KEYS)}"
    for key, (flag, convert) in KEYS.items():
        value, segments = quotes[key]
        for segment in segments:  # each quote is (part of) one line of the command, verbatim
            assert any(segment in line for line in lines), f"{key}: {segment!r} is not a README line"
        assert any(re.search(rf"--{flag}\b", s) for s in segments), f"{key}: its quote does not set --{flag}"
        node = config
        for part in key.split("."):
            node = node[part]
        assert node == value  # the parsed comment line is the loaded key
        node = sorted(node) if key == "models" else node
        assert node == convert(flags[flag]), f"{key} = {node!r}, the README's --{flag} gives {flags[flag]!r}"
    # the one key the grid cannot match: 128 lags over 4..256 have no integer step (lag_step: 2, a choice)
    assert len(lag_grid(config["snapshot"])) == int(flags["num_lags"]) - 1


def test_a_wrong_value_or_quote_fails():
    """The check can fail: a changed value, and a quote that is not the README's, are caught."""
    text = (ROOT / "config" / "paper.yaml").read_text()
    wrong_value = quoted_keys(text.replace("  T: 1024 ", "  T: 1536 "))["task.T"][0]
    assert wrong_value != KEYS["task.T"][1](readme_flags(README_COMMAND)["T"])
    quote = quoted_keys(text.replace("--noise_std 0.3", "--noise_std 0.4"))["task.noise_std"][1][0]
    assert not any(quote in line.strip() for line in README_COMMAND.splitlines())
