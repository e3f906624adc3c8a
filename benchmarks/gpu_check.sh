#!/usr/bin/env bash
# The GPU check: one call of at most 6.6 minutes (the parts' limits) that prints, as it goes (docs/performance.md, "On a GPU"):
#   1. the smoke DAG of every workflow on CUDA, all at once (default, linear cells, stacks, budget
#      and dataset recovery, long-T; both transports, the memory curve and the Lyapunov spectrum),
#      each one's wall time and count of jobs;
#   2. ms per training step of every gated cell and of nn.GRU and nn.LSTM at the replication size
#      (config/paper.yaml) and at the default size (benchmarks/train_step.py);
#   3. networks x steps per second of an ensemble of E networks against E separate trainings, E = 1, 4,
#      16, of one optimizer and of two (AdamW and SGD with momentum), and a budget job's control and
#      8 lags as one ensemble against one at a time (benchmarks/ensemble.py --mixed --budget 8);
#   4. one paper-size snapshot batch: its seconds and peak GPU memory (benchmarks/snapshot_batch.py).
#
#   benchmarks/gpu_check.sh                      on the GPU machine, from the repository root
#   benchmarks/gpu_check.sh --device cpu --dry   anywhere: the DAGs as dry runs (-n), tiny sizes
#
# Each part runs under its own `timeout`; a part that fails or runs out of time is reported and the
# next one runs. Everything printed is also written to $OUT/gpu_check.log (OUT defaults to
# ./gpu_check_out), with the DAGs' Snakemake logs in $OUT/dag_logs.tar.gz. Nothing is downloaded: a
# Python without snakemake (a GPU image without a registry) installs the wheels of .whl/ in the
# checkout, which ../shared/gpu/wheels.sh makes on a machine that reaches the registry
# (../shared/gpu/README.md); the device run carries .whl.
#
# Environment: PYTHON (default python3), GPU_CHECK_DAG_LIMIT (s, default 140), GPU_CHECK_STEP_LIMIT
# (default 75: the fused step compiles first), GPU_CHECK_ENSEMBLE_LIMIT (default 60), GPU_CHECK_SNAPSHOT_LIMIT (default 45),
# GPU_CHECK_PARTS (default dags,steps,ensemble,snapshot).
# Exit code: the number of parts that failed (0: all ran).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 2
DEVICE=cuda DRY=0
while (($#)); do
    case $1 in
        --device) DEVICE=$2; shift 2 ;;
        --dry) DRY=1; shift ;;
        *) echo "gpu_check: unknown argument $1 (allowed: --device cpu|cuda, --dry)" >&2; exit 2 ;;
    esac
done
PY=${PYTHON:-python3}
OUT=${OUT:-$REPO/gpu_check_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
PARTS=${GPU_CHECK_PARTS:-dags,steps,ensemble,snapshot}
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
failed=0
T0=$(date +%s.%N)

since() { echo "$(date +%s.%N) $1" | awk '{printf "%.1f", $1 - $2}'; }

# part NAME LIMIT CMD...: run CMD under `timeout LIMIT` (a shell function of this script gets
# LIMIT as its last argument and times its own commands), print its wall time and exit code
part() {
    local name=$1 limit=$2 start rc=0
    shift 2
    echo; echo "== $name (limit ${limit} s, at $(since "$T0") s)"
    start=$(date +%s.%N)
    if declare -F "$1" >/dev/null; then
        "$@" "$limit" || rc=$?
    else
        timeout -k 5 "$limit" "$@" || rc=$?
    fi
    ((rc == 124 || rc == 137)) && echo "gpu_check: $name ran past its ${limit} s"
    echo "== $name: exit $rc, $(since "$start") s"
    ((rc == 0)) || failed=$((failed + 1))
    return 0
}

# ---- set-up: the interpreter, the device, and snakemake from .whl/ where it is missing ----
echo "gpu_check: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?') device=$DEVICE dry=$DRY, $(nproc) cores"
"$PY" -c "import sys, torch; print('gpu_check: python', sys.version.split()[0], 'torch', torch.__version__,
'CUDA', torch.version.cuda, '| device 0:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"
if [[ $DEVICE == cuda ]]; then
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
        || { echo "gpu_check: torch sees no CUDA device; run with --device cpu"; exit 2; }
fi
if ! "$PY" -c "import snakemake, jsonschema" 2>/dev/null; then
    if compgen -G ".whl/*.whl" >/dev/null; then
        SITE=${TMPDIR:-/tmp}/learnwin-site
        echo "gpu_check: installing $(ls .whl/*.whl | wc -l) wheels of .whl/ into $SITE"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl \
            && export PYTHONPATH="$PYTHONPATH:$SITE"
    else
        echo "gpu_check: no snakemake here and no .whl/: run ../shared/gpu/wheels.sh where a registry is reachable"
    fi
fi

# ---- 1. the smoke DAG of every workflow, all at once, each in its own copy ----
dags() {
    local limit=$1 work n cores name pids=() names=() flags=(--config "device=$DEVICE")
    work=$(mktemp -d "${TMPDIR:-/tmp}/learnwin-gpu-check.XXXXXX")
    local SMOKE=(--configfile config/smoke.yaml) LINEAR=(--configfile config/linear-smoke.yaml)
    declare -A ARGS=(
        [default]="${SMOKE[*]}"
        [linear]="${LINEAR[*]}"
        [stacks]="${SMOKE[*]} benchmarks/gpu_check/stacks-smoke.yaml"
        [long-T]="${LINEAR[*]} benchmarks/gpu_check/long-T-smoke.yaml"
        [budget]="${SMOKE[*]}"
        [dataset]="${SMOKE[*]}"
    )
    declare -A EXTRA=(
        [budget]="recovery={protocol: budget, budgets: [16, 32, 64, 128, 256], models: [const, gru]}"
        [dataset]="recovery={protocol: dataset, models: [const, gru]}"
    )
    n=${#ARGS[@]}
    cores=$(( $(nproc) / n )); ((cores < 1)) && cores=1
    echo "gpu_check: $n DAGs at once, --cores $cores each, in $work"
    for name in default linear stacks long-T budget dataset; do
        mkdir -p "$work/$name"
        cp -r Snakefile workflow config profiles docs "$work/$name/"
        mkdir -p "$work/$name/benchmarks" && cp -r benchmarks/gpu_check "$work/$name/benchmarks/"
        local cmd=(timeout -k 5 "$limit" "$PY" -m snakemake --cores "$cores" --resources train_slot="$cores")
        ((DRY)) && cmd+=(-n)
        # shellcheck disable=SC2206  # the configfile list splits on spaces
        cmd+=(${ARGS[$name]} "${flags[@]}")
        [[ -n ${EXTRA[$name]:-} ]] && cmd+=("${EXTRA[$name]}" -- recovery)
        (cd "$work/$name" && start=$(date +%s.%N) && rc=0 && { "${cmd[@]}" >snakemake.log 2>&1 || rc=$?; } \
            && echo "$rc $(since "$start")" >result) &
        pids+=($!); names+=("$name")
    done
    local rc_all=0 i
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || true; done
    printf '%-9s %5s %9s %6s\n' workflow exit wall_s jobs
    for name in "${names[@]}"; do
        local log="$work/$name/snakemake.log" res=(? ?) jobs
        [[ -f $work/$name/result ]] && read -r -a res <"$work/$name/result"
        if ((DRY)); then
            jobs=$(awk '$1 == "total" {print $2}' "$log" | tail -1)
        else
            jobs=$(grep -oE '[0-9]+ of [0-9]+ steps' "$log" | tail -1 | cut -d' ' -f1)
        fi
        printf '%-9s %5s %9s %6s\n' "$name" "${res[0]}" "${res[1]}" "${jobs:-?}"
        [[ ${res[0]} == 0 ]] || { rc_all=1; echo "--- $name: the end of its log"; tail -n 25 "$log"; }
    done
    tar -czf "$OUT/dag_logs.tar.gz" -C "$work" $(cd "$work" && ls -d */snakemake.log */*/logs 2>/dev/null) 2>/dev/null
    rm -rf "$work"
    return $rc_all
}

# ---- sizes: the check's, or tiny ones for a CPU ----
if ((DRY)); then
    PAPER=(--config config/smoke.yaml --repeats 1 --rounds 1) DEFAULT=(--config config/smoke.yaml --repeats 1 --rounds 1)
    ENSEMBLE=(--config config/smoke.yaml --sizes 1,4 --steps 1 --rounds 1 --mixed --budget 2)
    SNAPSHOT=(--batch 4 --T 48 --hidden 8 --directions 2)
else
    PAPER=(--config config/paper.yaml --repeats 3 --rounds 1) DEFAULT=(--config config/config.yaml --repeats 10 --rounds 2)
    ENSEMBLE=(--config config/config.yaml --sizes 1,4,16 --steps 3 --rounds 2 --mixed --budget 8)
    SNAPSHOT=()
fi

[[ ,$PARTS, == *,dags,* ]] && part "1. smoke DAGs of every workflow on $DEVICE" "${GPU_CHECK_DAG_LIMIT:-140}" dags
if [[ ,$PARTS, == *,steps,* ]]; then
    part "2a. ms per training step, replication size" "${GPU_CHECK_STEP_LIMIT:-75}" \
        "$PY" benchmarks/train_step.py --device "$DEVICE" --sizes default "${PAPER[@]}"
    part "2b. ms per training step, default size" "${GPU_CHECK_STEP_LIMIT:-75}" \
        "$PY" benchmarks/train_step.py --device "$DEVICE" --sizes default "${DEFAULT[@]}"
fi
if [[ ,$PARTS, == *,ensemble,* ]]; then
    part "3. ensembles of E = 1, 4, 16 (one optimizer, two) and of a budget job's lags, against separate trainings" "${GPU_CHECK_ENSEMBLE_LIMIT:-60}" \
        "$PY" benchmarks/ensemble.py --device "$DEVICE" --models gru,lstm,const "${ENSEMBLE[@]}"
fi
[[ ,$PARTS, == *,snapshot,* ]] && part "4. one paper-size snapshot batch" "${GPU_CHECK_SNAPSHOT_LIMIT:-45}" \
    "$PY" benchmarks/snapshot_batch.py --config config/paper.yaml --device "$DEVICE" --models gru,lstm "${SNAPSHOT[@]}"

echo; echo "gpu_check: done in $(since "$T0") s, $failed part(s) failed; log $OUT/gpu_check.log"
exit "$failed"
