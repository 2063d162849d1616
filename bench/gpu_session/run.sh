#!/bin/bash
# One call on a lent GPU machine (issue 35), prepared on the CPU: every part has its own time box and
# writes under $OUT, so a part that runs long or fails leaves the others' results.
#
#   bash bench/gpu_session/run.sh tests:170 scale:100 gpu:1,2,3:120 attention:90 memory:90
#   bash bench/gpu_session/run.sh tests:200:4+gpuwarm:2,4:200 gpu:2,4:120:2   # '+' joins parts run at once
#
# parts: tests:S (python -m pytest -m gpu tests/gpu), scale:S (the gpu-scale grid beside this file through
# `cemctl launch --gpus 0`, with `plan`'s estimate), gpu:ROWS:S[:PROFILED] (bench/gpu.py's rows, 1-based; "all";
# PROFILED: rows whose top kernels torch.profiler records after timing them),
# gpuwarm:ROWS:S (those rows compiled in parallel processes first, numbers discarded), tests:S:N (N workers),
# diag:S (FlexAttention per call shape, bench/gpu_session/diag.py),
# attention:S (the CEM attention sublayer, FlexAttention vs SDPA), memory:S[:SIZES] (largest micro-batch per
# size), compile:S:VARIANTS (bench/gpu_session/compile_diag.py per variant, in parallel, each with a cold cache).
# Parts joined by '+' run at the same time (compiling beside each other: their timings are not the GPU's alone).
# flexwarm:S[:SHAPES] (compiles bench/gpu_session/flexopts.py's candidates, one process each, numbers discarded),
# flexopts:S[:SHAPES] (FlexAttention's kernel options timed with the GPU tests' error gate; SHAPES default shared),
# flexstep:S (whole 134M steps with the defaults and with flexopts' winner), concurrency:S[:JOBS] (concurrency.py:
# a warm-up launch, then 1, 2, 4, 8 runs at once on GPU 0, each launch time-boxed to S seconds).
# Everything written lands in $OUT/session.tar.gz at the end (the device tool returns at most 8 files).
set -u
OUT=${OUT:-/tmp/gpu-session-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD TOKENIZERS_PARALLELISM=false
if ls .whl/*.whl >/dev/null 2>&1; then  # packages the device image lacks (SQLAlchemy, submitit), as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
fi
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, torch.cuda.get_device_name(0))'
} 2>&1 | tee "$OUT/env.txt"
mapfile -t FLEXOPTS_CANDIDATES < <(python3 -c 'from bench.gpu_session.flexopts import CANDIDATES; print("\n".join(CANDIDATES))' 2>/dev/null)
bench_part() {  # section, extra args, seconds
  timeout "$3" python3 -m bench --only "$1" $2 --out "$OUT/bench" > "$OUT/bench_$1.log" 2>&1
  echo "== bench $1: exit $? =="; grep -E "^\[(gpu|gpu_attention|gpu_memory)\]" "$OUT/bench_$1.log" | cut -c1-300
  grep -E "Error|error" "$OUT/bench_$1.log" | tail -5 | cut -c1-300
}
one_part() {
  local part=$1 what a b c
  IFS=: read -r what a b c <<< "$part"
  echo "== $part at $(date -u +%T) =="
  case "$what" in
    tests)
      timeout "$a" python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider --timeout 150 --durations=0 -n "${b:-4}" \
        > "$OUT/pytest.log" 2>&1
      echo "== tests: exit $? =="; grep -E "passed|failed|skipped|PASSED|FAILED|ERROR|Error|[0-9.]+s (call|setup)" "$OUT/pytest.log" | tail -40 | cut -c1-300 ;;
    scale)
      W=$(mktemp -d /tmp/gpu-scale.XXXXXX)  # a folder of its own: nothing there before is removed
      G=bench/gpu_session/gpu_scale.toml
      python3 -m cemctl.cli plan "$G" --db "$W/results.db" --runs-dir "$W/runs" --json > "$OUT/plan.json" 2> "$OUT/plan.err"
      t0=$(date +%s)
      timeout "$a" python3 -m cemctl.cli launch "$G" --gpus 0 --db "$W/results.db" --runs-dir "$W/runs" > "$OUT/launch.log" 2>&1
      echo "== launch: exit $? after $(( $(date +%s) - t0 )) s ==" ; tail -5 "$OUT/launch.log" | cut -c1-300
      python3 -m cemctl.cli status --db "$W/results.db" --runs-dir "$W/runs" 2>&1 | tail -8 | cut -c1-200
      (cd "$W" && tar czf "$OUT/gpu_scale_runs.tar.gz" --exclude='*.pt' --exclude='ckpt*' runs results.db) ;;
    gpu) bench_part gpu "--gpu-rows=${a/all/} --gpu-profile=${c:-}" "$b"
      grep -h '^\[gpu_profile\]' "$OUT/bench_gpu.log" | grep "'kernel': 'all " | cut -c1-200 ;;
    gpuwarm)  # compile rows in parallel processes (numbers discarded) so that a timed `gpu:` part reads inductor's cache
      for r in ${a//,/ }; do timeout "$b" python3 -m bench --only gpu --gpu-rows="$r" --out "/tmp/warm$r" > "/tmp/warm$r.log" 2>&1 & done
      wait; echo "== warm: $(grep -h '^\[gpu\]' /tmp/warm*.log | cut -c1-200)" ;;
    diag) timeout "$a" python3 bench/gpu_session/diag.py > "$OUT/diag.log" 2>&1; echo "== diag: exit $? =="; grep '^\[diag\]' "$OUT/diag.log" | cut -c1-400 ;;
    attention) bench_part gpu_attention "" "$a" ;;
    memory) bench_part gpu_memory "--gpu-memory-sizes=${b:-}" "$a" ;;
    compile)
      for v in ${b//,/ }; do TORCH_LOGS=recompiles,graph_breaks timeout "$a" python3 bench/gpu_session/compile_diag.py "$v" > "$OUT/compile_$v.log" 2>&1 & done
      wait; grep -h '^\[compile\]' "$OUT"/compile_*.log | cut -c1-700 ;;
    flexwarm)  # flexopts.py's candidates compiled one process each (numbers discarded) so that a later flexopts part
      # reads inductor's cache and can run after the tests; max-autotune is left out (it would tune beside the others)
      mkdir -p "$OUT/warm"
      TORCHINDUCTOR_COMPILE_THREADS=2 timeout "$a" bash -c 'for c in "${@:3}"; do [ "$c" = max-autotune ] && continue; python3 bench/gpu_session/flexopts.py --warm --shapes "$1" --candidates "$c" > "$2/warm/${c//[^A-Za-z0-9]/_}.log" 2>&1 & done; wait' \
        _ "${b:-shared}" "$OUT" "${FLEXOPTS_CANDIDATES[@]}"
      echo "== flexwarm: exit $? =="; grep -h '"failed"' "$OUT"/warm/*.log | cut -c1-300 ;;
    flexopts)  # FlexAttention's kernel options timed and gated (flexopts.py); $OUT/flexopts.json after every row
      timeout "$a" python3 bench/gpu_session/flexopts.py --shapes "${b:-shared}" --out "$OUT" > "$OUT/flexopts.log" 2>&1
      echo "== flexopts: exit $? =="; grep -E '^\[flexopts' "$OUT/flexopts.log" | cut -c1-400 ;;
    flexstep)  # whole 134M steps with the defaults and with flexopts.json's winner; $OUT/steps.json after every row
      timeout "$a" python3 bench/gpu_session/flexopts.py --steps-from "$OUT/flexopts.json" --out "$OUT" > "$OUT/flexstep.log" 2>&1
      echo "== flexstep: exit $? =="; grep -E '^\[flexopts-step' "$OUT/flexstep.log" | cut -c1-400 ;;
    concurrency)  # N runs at once on GPU 0 (concurrency.py), each launch time-boxed to S seconds
      jobs=${b:-1,2,4,8}; n=$(( $(tr -cd , <<< "$jobs" | wc -c) + 2 ))  # the Ns and the warm-up, each with its stop
      timeout $(( n * (a + 60) )) python3 bench/gpu_session/concurrency.py --jobs "$jobs" --budget-s "$a" --out "$OUT" > "$OUT/concurrency.log" 2>&1
      echo "== concurrency: exit $? =="; grep -E '^\[concurrency\]|^\||^Most' "$OUT/concurrency.log" | cut -c1-300 ;;
    *) echo "unknown part $what" ;;
  esac
}
for group in "$@"; do
  IFS=+ read -r -a parts <<< "$group"
  for part in "${parts[@]}"; do one_part "$part" & done
  wait
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader
echo "== done at $(date -u +%T) =="
(cd "$OUT" && tar czf /tmp/session.tar.gz --exclude=session.tar.gz . && mv /tmp/session.tar.gz . \
  && find . -mindepth 1 ! -name session.tar.gz ! -name env.txt -delete)
