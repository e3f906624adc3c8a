#!/usr/bin/env bash
# Device check: run the smoke DAG with device=cuda and print per-stage wall times.
#
#   benchmarks/gpu_check.sh            (from anywhere; run on a machine with an NVIDIA GPU)
#
# It needs a Python on PATH (or $PYTHON) whose torch sees CUDA, plus snakemake and the
# learnwin dependencies (pandas, pyarrow, scipy, matplotlib, jsonschema, pyyaml). Nothing is
# downloaded (GPU machines may have no network): learnwin itself is taken from this checkout
# through PYTHONPATH, so it need not be installed. The run happens in a temporary copy of the
# workflow, so the checkout's results are untouched.
#
# Environment:
#   PYTHON=...            interpreter to use (default: python3 on PATH)
#   GPU_CHECK_LIMIT=300   seconds allowed for the Snakemake run (default 300 = 5 minutes)
#   GPU_CHECK_CORES=N     --cores (default: nproc, at most 8)
#   GPU_CHECK_KEEP=1      keep the temporary copy (its path is printed)
#   OUT=DIR               also copy the benchmark TSVs, logs and the timing table there
#
# Exit codes: 0 ok; 2 no usable Python/CUDA/dependencies; other: the Snakemake run failed.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
LIMIT=${GPU_CHECK_LIMIT:-300}
CORES=${GPU_CHECK_CORES:-$(($(nproc) < 8 ? $(nproc) : 8))}

command -v "$PY" >/dev/null 2>&1 || { echo "gpu_check: no '$PY' on PATH (set PYTHON=/path/to/python)" >&2; exit 2; }

# ---- the interpreter must have CUDA torch and the workflow's dependencies ----
if ! "$PY" - <<'EOF'
import importlib, sys
missing = [m for m in ("torch", "snakemake", "pandas", "pyarrow", "scipy", "matplotlib", "jsonschema", "yaml")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: {sys.executable} lacks {', '.join(missing)}; install them "
             "(pip install -e '.[test]' in a venv made with --system-site-packages keeps a CUDA torch)")
import torch
if not torch.cuda.is_available():
    sys.exit(f"gpu_check: torch {torch.__version__} in {sys.executable} sees no CUDA device "
             f"(built for CUDA {torch.version.cuda}); use a CUDA build of torch on a GPU machine")
print(f"gpu_check: python {sys.executable}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"device 0: {torch.cuda.get_device_name(0)}")
EOF
then
    exit 2
fi
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# ---- a throw-away copy of the workflow ----
WORK=$(mktemp -d "${TMPDIR:-/tmp}/learnwin-gpu-check.XXXXXX")
cleanup() { if [[ ${GPU_CHECK_KEEP:-0} == 1 ]]; then echo "gpu_check: kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
for f in Snakefile workflow config profiles docs; do
    [[ -e $REPO/$f ]] && cp -r "$REPO/$f" "$WORK/"
done
rm -rf "$WORK/results" "$WORK/.snakemake"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

# ---- the smoke DAG on CUDA ----
# device=cuda (not auto): config checking fails at parse time if CUDA is not visible, so a
# silent CPU fallback cannot pass as a GPU run. Snakemake runs the default profile
# (profiles/default) plus these flags; train_slot is raised with the cores.
echo "gpu_check: running the smoke DAG in $WORK with --cores $CORES, limit $LIMIT s"
start=$(date +%s.%N)
rc=0
(cd "$WORK" && timeout -k 15 "$LIMIT" "$PY" -m snakemake --cores "$CORES" --resources train_slot="$CORES" \
    --configfile config/smoke.yaml --config device=cuda) >"$WORK/snakemake.log" 2>&1 || rc=$?
end=$(date +%s.%N)
if ((rc != 0)); then
    tail -n 60 "$WORK/snakemake.log" >&2
    ((rc == 124 || rc == 137)) && echo "gpu_check: the run exceeded $LIMIT s" >&2
    echo "gpu_check: snakemake failed (exit $rc); log: $WORK/snakemake.log" >&2
    GPU_CHECK_KEEP=1
    exit "$rc"
fi

# ---- per-stage wall times from the benchmark TSVs (learnwin.infra.layout.BENCH/<rule>/...tsv, column s) ----
"$PY" - "$WORK" "$start" "$end" <<'EOF' | tee "$WORK/gpu_check_times.txt"
import sys
from pathlib import Path
import pandas as pd
from learnwin.infra import layout

work, start, end = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
rows = []
bench_dir = work / layout.BENCH
for tsv in sorted(bench_dir.rglob("*.tsv")):
    rule = tsv.relative_to(bench_dir).parts[0]
    bench = pd.read_csv(tsv, sep="\t")
    rows.append({"rule": rule, "s": float(bench["s"].iloc[0]), "max_rss": float(bench["max_rss"].iloc[0])})
if not rows:
    sys.exit(f"gpu_check: no benchmark TSVs under {bench_dir}")
table = (pd.DataFrame(rows).groupby("rule")
         .agg(jobs=("s", "size"), total_s=("s", "sum"), mean_s=("s", "mean"), max_s=("s", "max"),
              max_rss_mb=("max_rss", "max"))
         .sort_values("total_s", ascending=False))
pd.set_option("display.width", 120)
print(table.round(2).to_string())
print(f"sum of job times: {table['total_s'].sum():.1f} s; wall time of the whole run: {end - start:.1f} s")
EOF

# Evidence that the training really ran on the GPU: the device named in the job logs.
LOGS=$("$PY" -c "from learnwin import layout; print(layout.LOGS)")
BENCH=$("$PY" -c "from learnwin import layout; print(layout.BENCH)")
if grep -rqi "cuda" "$WORK/$LOGS/train_model" 2>/dev/null; then
    echo "gpu_check: train_model logs mention cuda"
else
    echo "gpu_check: warning: no train_model log mentions 'cuda'; check $WORK/$LOGS" >&2
fi

if [[ -n ${OUT:-} ]]; then
    mkdir -p "$OUT/gpu_check"
    cp -r "$WORK/$BENCH" "$WORK/$LOGS" "$WORK/snakemake.log" "$WORK/gpu_check_times.txt" \
        "$OUT/gpu_check/" 2>/dev/null || true
fi
echo "gpu_check: ok"
