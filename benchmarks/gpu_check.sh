#!/usr/bin/env bash
# The GPU check: one call that fits a 10-minute command from a cold machine (every part under its own
# limit, all within GPU_CHECK_BUDGET s), printing as it goes (docs/performance.md, "On a GPU").
# First, the first answer, all within GPU_CHECK_FIRST_BUDGET s (300) of the start, rows as they finish:
#   A1. versions: Python, torch, CUDA, cuDNN, the device (preflight.py --versions);
#   A2. ms per training step at the replication size (T 1024, H 128, batch 512) of the GRU, LSTM and
#       ConstGate, compiled and graphed (and graphed alone) against cuDNN with TF32 off (TF32 beside
#       it), each cell's peak GPU memory (benchmarks/train_step.py --sizes replication --models gru,lstm,const);
#   A3. the GRU's member ensemble at E 1 and 16 against separate trainings (benchmarks/ensemble.py);
#   A4. one small DAG: the default smoke DAG on the device.
# Then the rest, each part only where time is left of GPU_CHECK_BUDGET:
#   0. preflight: torch, CUDA and cuDNN versions, the device, a C compiler, Python's headers, triton,
#      and one tiny function compiled for the device (benchmarks/gpu_check/preflight.py);
#   1. the smoke DAG of every other workflow on CUDA, all at once (linear cells, stacks, budget
#      and dataset recovery, long-T; both transports, the memory curve and the Lyapunov spectrum),
#      each one's exit, wall time and count of jobs as it finishes; the fused step with eager
#      kernels (LEARNWIN_FUSED=eager: graphed, nothing compiled; GPU_CHECK_DAG_FUSED=auto compiles);
#   2. ms per training step of the other gated cells (SharedGate, DiagGate) and of nn.GRU and nn.LSTM
#      at the replication size (config/paper.yaml's), then of every cell at the default size, one
#      row at a time (benchmarks/train_step.py; the fused step compiles cold first), each cell's row
#      of the GPU cost table after it;
#   3. networks x steps per second of an ensemble of E networks against E separate trainings, E = 1, 4,
#      16, of one optimizer and of two (AdamW and SGD with momentum), and a budget job's control and
#      8 lags as one ensemble against one at a time (benchmarks/ensemble.py --mixed --budget 8);
#   4. one paper-size snapshot batch: its seconds and peak GPU memory (benchmarks/snapshot_batch.py),
#      the fused step off (LEARNWIN_FUSED=off: the network's one training step compiles nothing);
#   then a summary: each part's exit and seconds, the GPU cost table's rows (the `gpu_cost` lines)
#   and the command that writes the table from this log (python -m learnwin.infra.gpu_cost LOG; run
#   here into $OUT/gpu_cost.yaml where that module exists).
#
#   benchmarks/gpu_check.sh                      on the GPU machine, from the repository root
#   benchmarks/gpu_check.sh --device cpu --dry   anywhere: the DAGs as dry runs (-n), tiny sizes, no compiled step
#
# Each part runs under its own `timeout` (its limit, cut to what is left of the budget; a part with
# under 20 s left is skipped); a part that fails or runs out of time is reported and the next one
# runs. Everything printed is also written to $OUT/gpu_check.log (OUT defaults to ./gpu_check_out),
# with the DAGs' Snakemake logs in $OUT/dag_logs.tar.gz. Nothing is downloaded: a Python without
# snakemake (a GPU image without a registry) installs the wheels of .whl/ in the checkout, which
# ../shared/gpu/wheels.sh makes on a machine that reaches the registry (../shared/gpu/README.md);
# the device run carries .whl.
#
# Environment: PYTHON (default python3), GPU_CHECK_BUDGET (s, default 540; --dry 1080 and every limit
# doubled: a loaded CPU is not what is timed), GPU_CHECK_FIRST_BUDGET (s, default 300; --dry 600),
# GPU_CHECK_PLAN=1 (print each part's name and limit, run nothing: its elapsed time is the sum of
# the limits before it), limits in s: the first answer's GPU_CHECK_VERSIONS_LIMIT (30),
# GPU_CHECK_FIRST_STEP_LIMIT (150), GPU_CHECK_FIRST_ENSEMBLE_LIMIT (50), GPU_CHECK_FIRST_DAG_LIMIT (70);
# GPU_CHECK_PREFLIGHT_LIMIT (default 75: a cold inductor and Triton), GPU_CHECK_DAG_LIMIT (130),
# GPU_CHECK_STEP_LIMIT (200: about 20 cold compilations of step functions, then the timings),
# GPU_CHECK_ENSEMBLE_LIMIT (60), GPU_CHECK_SNAPSHOT_LIMIT (45); GPU_CHECK_PARTS (default
# first,preflight,dags,steps,ensemble,snapshot); GPU_CHECK_COMPILE_THREADS (inductor's compile workers per
# process, TORCHINDUCTOR_COMPILE_THREADS: default 8; 1 in the DAGs' jobs).
# Exit code: the number of parts that failed or were skipped (0: all ran).
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
PARTS=${GPU_CHECK_PARTS:-first,preflight,dags,steps,ensemble,snapshot}
BUDGET=${GPU_CHECK_BUDGET:-$((DRY ? 1080 : 540))}  # a dry run doubles every limit: the CPU is not what is timed
FIRST=${GPU_CHECK_FIRST_BUDGET:-$((DRY ? 600 : 300))}
PLAN=${GPU_CHECK_PLAN:-0} PLANNED=0
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TORCHINDUCTOR_COMPILE_THREADS=${GPU_CHECK_COMPILE_THREADS:-8}
((DRY)) && export LEARNWIN_FUSED=eager  # a CPU's compilations of every step function take minutes
failed=0 SUMMARY=()
T0=$(date +%s.%N)

since() { echo "$(date +%s.%N) $1" | awk '{printf "%.1f", $1 - $2}'; }
elapsed() { if ((PLAN)); then echo "$PLANNED"; else since "$T0"; fi; }  # s since the start (planned: the limits)

# part NAME LIMIT CMD...: run CMD under `timeout LIMIT` (a shell function of this script gets
# LIMIT as its last argument and times its own commands), LIMIT cut to what is left until END s
# from the start (the first answer's budget, then the whole budget less 10 s for the summary); a
# part with under 20 s left is skipped; print its wall time and exit code (GPU_CHECK_PLAN: its limit alone)
part() {
    local name=$1 limit=$2 start rc=0 left
    shift 2
    ((DRY)) && limit=$((limit * 2))
    left=$(awk -v e="$(elapsed)" -v end="$END" 'BEGIN {printf "%d", end - e}')
    if ((left < 20)); then
        echo; echo "== $name: skipped, ${left} s left of the ${END} s budget"
        SUMMARY+=("$(printf '%-64s %8s %8s' "$name" skipped -)"); failed=$((failed + 1))
        return 0
    fi
    ((limit > left)) && limit=$left
    echo; echo "== $name (limit ${limit} s, at $(elapsed) s)"
    if ((PLAN)); then
        PLANNED=$((PLANNED + limit))
        SUMMARY+=("$(printf '%-64s %8s %8s' "$name" planned "$limit")")
        return 0
    fi
    start=$(date +%s.%N)
    if declare -F "$1" >/dev/null; then
        "$@" "$limit" || rc=$?
    else
        timeout -k 5 "$limit" "$@" || rc=$?
    fi
    ((rc == 124 || rc == 137)) && echo "gpu_check: $name ran past its ${limit} s"
    echo "== $name: exit $rc, $(since "$start") s"
    SUMMARY+=("$(printf '%-64s %8s %8s' "$name" "$rc" "$(since "$start")")")
    ((rc == 0)) || failed=$((failed + 1))
    return 0
}

# ---- set-up: the interpreter, the device, and snakemake from .whl/ where it is missing ----
echo "gpu_check: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?') device=$DEVICE dry=$DRY, $(nproc) cores"
[[ $DEVICE == cuda ]] && command -v nvidia-smi >/dev/null \
    && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import sys, torch; cuda = torch.cuda.is_available(); print('gpu_check: python', sys.version.split()[0],
'torch', torch.__version__, 'CUDA', torch.version.cuda, '| device 0:', torch.cuda.get_device_name(0) if cuda else 'none')
sys.exit(sys.argv[1] == 'cuda' and not cuda)" "$DEVICE" \
    || { echo "gpu_check: torch sees no CUDA device; run with --device cpu"; exit 2; }
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

# ---- the smoke DAGs of the workflows NAME... (default linear stacks long-T budget dataset), all at
# once, each in its own copy: dags NAME... LIMIT ----
dags() {
    local limit=${!#} work n cores name pids=() names=() flags=(--config "device=$DEVICE")
    local todo=("${@:1:$#-1}")
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
    n=${#todo[@]}
    cores=$(( $(nproc) / n )); ((cores < 1)) && cores=1
    echo "gpu_check: $n DAG(s) at once, --cores $cores each, in $work"
    for name in "${todo[@]}"; do
        mkdir -p "$work/$name"
        cp -r Snakefile workflow config profiles docs "$work/$name/"
        mkdir -p "$work/$name/benchmarks" && cp -r benchmarks/gpu_check "$work/$name/benchmarks/"
        local cmd=(env LEARNWIN_FUSED="${GPU_CHECK_DAG_FUSED:-eager}" TORCHINDUCTOR_COMPILE_THREADS=1
                   timeout -k 5 "$limit" "$PY" -m snakemake --cores "$cores" --resources train_slot="$cores")
        ((DRY)) && cmd+=(-n)
        # shellcheck disable=SC2206  # the configfile list splits on spaces
        cmd+=(${ARGS[$name]} "${flags[@]}")
        [[ -n ${EXTRA[$name]:-} ]] && cmd+=("${EXTRA[$name]}" -- recovery)
        (cd "$work/$name" && start=$(date +%s.%N) && rc=0 && { "${cmd[@]}" >snakemake.log 2>&1 || rc=$?; } \
            && echo "$rc $(since "$start")" >result) &
        pids+=($!); names+=("$name")
    done
    # each DAG's row as it finishes (its `result`: exit code and wall seconds)
    local rc_all=0 alive i name
    declare -A shown=()
    printf '%-9s %5s %9s %6s\n' workflow exit wall_s jobs
    while ((${#shown[@]} < n)); do
        alive=0
        for i in "${pids[@]}"; do kill -0 "$i" 2>/dev/null && alive=1; done
        for name in "${names[@]}"; do
            [[ -n ${shown[$name]:-} ]] && continue
            [[ -f $work/$name/result ]] || ((!alive)) || continue
            shown[$name]=1
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
        ((${#shown[@]} < n)) && sleep 1
    done
    for i in "${pids[@]}"; do wait "$i" || true; done
    tar -czf "$OUT/dag_logs.tar.gz" -C "$work" $(cd "$work" && ls -d */snakemake.log */*/logs 2>/dev/null) 2>/dev/null
    rm -rf "$work"
    return $rc_all
}

# ---- part 2: the gated cells the first answer did not time at the replication size, then every
# cell at the default size: steps LIMIT ----
steps() {
    local limit=$1 start=$SECONDS rc=0
    if ((${#REPLICATION[@]})); then
        timeout -k 5 "$limit" "$PY" benchmarks/train_step.py --device "$DEVICE" "${REPLICATION[@]}" || rc=$?
    fi
    timeout -k 5 $((limit - (SECONDS - start))) "$PY" benchmarks/train_step.py --device "$DEVICE" "${STEPS[@]}" || rc=$?
    return $rc
}

# ---- sizes: the check's, or tiny ones for a CPU ----
FIRST_CELLS=(--models gru,lstm,const)
if ((DRY)); then
    FIRST_STEPS=(--config config/smoke.yaml --sizes default "${FIRST_CELLS[@]}" --repeats 1 --rounds 1)
    FIRST_ENSEMBLE=(--config config/smoke.yaml --models gru --sizes 1,16 --steps 1 --rounds 1)
    REPLICATION=()
    STEPS=(--config config/smoke.yaml --sizes default --repeats 1 --rounds 1)
    ENSEMBLE=(--config config/smoke.yaml --models gru --sizes 1,4 --steps 1 --rounds 1 --mixed --budget 2)
    SNAPSHOT=(--batch 4 --T 48 --hidden 8 --directions 2)
else  # the replication size first: the cost table's reference rows and the 2x cuDNN target
    FIRST_STEPS=(--config config/config.yaml --sizes replication "${FIRST_CELLS[@]}" --repeats 3 --rounds 2)
    FIRST_ENSEMBLE=(--config config/config.yaml --models gru --sizes 1,16 --steps 3 --rounds 2)
    REPLICATION=(--config config/config.yaml --sizes replication --models shared,diag --repeats 5 --rounds 2)
    STEPS=(--config config/config.yaml --sizes default --repeats 5 --rounds 2)
    ENSEMBLE=(--config config/config.yaml --models gru,lstm,const --sizes 1,4,16 --steps 3 --rounds 2 --mixed --budget 8)
    SNAPSHOT=()
fi

# ---- the first answer: within FIRST s of the start ----
END=$(awk -v f="$FIRST" -v b="$BUDGET" 'BEGIN {print (f < b - 10 ? f : b - 10)}')
if [[ ,$PARTS, == *,first,* ]]; then
    part "A1. versions: Python, torch, CUDA, cuDNN, the device" "${GPU_CHECK_VERSIONS_LIMIT:-30}" \
        "$PY" benchmarks/gpu_check/preflight.py "$DEVICE" --versions
    part "A2. GRU, LSTM, ConstGate steps at the replication size, peak memory" \
        "${GPU_CHECK_FIRST_STEP_LIMIT:-150}" "$PY" benchmarks/train_step.py --device "$DEVICE" "${FIRST_STEPS[@]}"
    part "A3. the GRU's member ensemble at E 1 and 16" "${GPU_CHECK_FIRST_ENSEMBLE_LIMIT:-50}" \
        "$PY" benchmarks/ensemble.py --device "$DEVICE" "${FIRST_ENSEMBLE[@]}"
    part "A4. one small DAG: the default smoke DAG on $DEVICE" "${GPU_CHECK_FIRST_DAG_LIMIT:-70}" dags default
    echo; echo "== the first answer in $(elapsed) s of its ${END} s; the rest where time is left"
fi

# ---- the rest, each part where time is left ----
END=$((BUDGET - 10))
[[ ,$PARTS, == *,preflight,* ]] && part "0. preflight: versions, a C compiler, triton, one compiled function" \
    "${GPU_CHECK_PREFLIGHT_LIMIT:-75}" "$PY" benchmarks/gpu_check/preflight.py "$DEVICE"
[[ ,$PARTS, == *,dags,* ]] && part "1. smoke DAGs of every other workflow on $DEVICE" "${GPU_CHECK_DAG_LIMIT:-130}" \
    dags linear stacks long-T budget dataset
[[ ,$PARTS, == *,steps,* ]] && part "2. ms per training step, the other cells at the replication size, every cell at the default" \
    "${GPU_CHECK_STEP_LIMIT:-200}" steps
[[ ,$PARTS, == *,ensemble,* ]] && part "3. ensembles of E = 1, 4, 16 and of a budget job's lags" \
    "${GPU_CHECK_ENSEMBLE_LIMIT:-60}" \
    "$PY" benchmarks/ensemble.py --device "$DEVICE" "${ENSEMBLE[@]}"
[[ ,$PARTS, == *,snapshot,* ]] && part "4. one paper-size snapshot batch, the fused step off" \
    "${GPU_CHECK_SNAPSHOT_LIMIT:-45}" env LEARNWIN_FUSED=off \
    "$PY" benchmarks/snapshot_batch.py --config config/paper.yaml --device "$DEVICE" --models gru,lstm "${SNAPSHOT[@]}"

# ---- summary: the parts, the GPU cost table's rows, the command that writes the table ----
echo; echo "== summary: $(since "$T0") s of the ${BUDGET} s budget, $failed part(s) failed or skipped"
printf '%-64s %8s %8s\n' part exit seconds
printf '%s\n' "${SUMMARY[@]}"
sleep 0.5  # tee's copy of the parts' last lines
rows=$(grep -E '^gpu_cost (device|step|snapshot) ' "$OUT/gpu_check.log" | grep -v '^gpu_cost device' | sort -u)
echo "GPU cost table rows ($(grep -c . <<<"$rows") step and snapshot rows):"
[[ -n $rows ]] && echo "$rows"
echo "write the table from this log: python -m learnwin.infra.gpu_cost $OUT/gpu_check.log"
if [[ -n $rows ]] && "$PY" -c "import learnwin.infra.gpu_cost" 2>/dev/null; then
    "$PY" -m learnwin.infra.gpu_cost "$OUT/gpu_check.log" --out "$OUT/gpu_cost.yaml" \
        || echo "gpu_check: the table could not be written from the log"
fi
echo "gpu_check: done in $(since "$T0") s, $failed part(s) failed or skipped; log $OUT/gpu_check.log"
exit "$failed"
