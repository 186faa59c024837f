#!/usr/bin/env bash
# Runs Quorum's on-device checks on a GPU machine without a Rust toolchain, from the project root that
# holds target/gpu-bundle (see shared/gpu/README.md): the gpu-tests suite, the device benchmarks, and
# the `cuda` conformance engine over the corpus (generated here with this machine's onnx).
#   run.sh [all|tests|bench|models|wgpu-models|conformance|audit|pytorch|fuzz|mutants|sanitizer|wgpu|strict|nightly]...
#   (default: all but nightly, strict and audit)
# `audit` runs the corpus's node tests on cuda with every kernel launch audited against the byte
# ranges it declares (QUORUM_AUDIT_LAUNCHES=1; a launch that breaks its declaration fails its case).
# `strict` times one strictly verified run of GPT-2-small, bert-base b8 and ResNet-50 (exported here).
# `nightly` measures what `cargo xtask nightly --from` renders on a machine with a toolchain: the
# benchmark matrix, thresholds, graph-capture outcomes and the auto validation (quorum-matrix), with
# the cuda conformance report beside them; it takes most of a 10-minute call on its own.
# Logs go to $OUT (or target/gpu-bundle/logs); a short summary table ends the output.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
B="$ROOT/target/gpu-bundle"
LOGS="${OUT:-$B/logs}"
mkdir -p "$LOGS"
export QUORUM_ROOT="$ROOT"
export QUORUM_PYTHON="${QUORUM_PYTHON:-python3}"
cd "$ROOT"
for f in gpu-tests quorum conformance quorum-matrix; do
  [ -f "$B/$f.gz" ] && gunzip -c "$B/$f.gz" > "$B/$f" && chmod +x "$B/$f"
done
what="${*:-all}"
want() { [[ ( " $what " == *" all "* && $1 != nightly && $1 != strict && $1 != audit ) || " $what " == *" $1 "* ]]; }
export QUORUM_COMMIT="$(cat "$B/commit.txt" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$LOGS/device.txt" 2>&1

if want tests; then
  timeout "${TESTS_TIMEOUT:-240}" "$B/gpu-tests" --test-threads=4 > "$LOGS/gpu-tests.log" 2>&1
  echo "rc=$?" >> "$LOGS/gpu-tests.log"
  # FusedAttention's other routes (the suite above takes the default, the tensor-core kernel).
  for route in chain one-pass; do
    QUORUM_CUDA_ATTENTION=$route timeout 120 "$B/gpu-tests" attention:: --test-threads=1 >> "$LOGS/gpu-tests.log" 2>&1
    echo "rc=$?" >> "$LOGS/gpu-tests.log"
  done
fi
if want bench; then
  timeout "${BENCH_TIMEOUT:-90}" "$B/gpu-tests" --ignored bench_ --nocapture --test-threads=1 > "$LOGS/bench.log" 2>&1
  echo "rc=$?" >> "$LOGS/bench.log"
  # The f16 GEMM again on the CUDA cores, beside its tensor-core figures above.
  QUORUM_CUDA_F16=cores timeout 60 "$B/gpu-tests" --ignored --exact bench::bench_f16_gemm --nocapture >> "$LOGS/bench.log" 2>&1
fi
if want models; then
  # Generates the corpus (first use) and runs the two light models through the cuda engine.
  timeout 120 "$B/conformance" --engine cuda --filter 'light/test_(resnet50|squeezenet)' --no-report > "$LOGS/models.log" 2>&1
  model="target/corpus/onnx-1.23.2/light/test_resnet50/model.onnx"
  small="target/corpus/onnx-1.23.2/light/test_squeezenet/model.onnx"
  if [ -f "$model" ]; then
    timeout 60 "$B/quorum" bench "$model" --provider cuda --iters 30 --json > "$LOGS/resnet50-cuda.json" 2>&1
    timeout 60 "$B/quorum" bench "$model" --provider auto --iters 30 --json > "$LOGS/resnet50-auto.json" 2>&1
    timeout 60 "$B/quorum" bench "$small" --provider cuda --verify strict --iters 1 --warmup 0 --json > "$LOGS/squeezenet-strict.json" 2>&1
    timeout 60 "$B/quorum" bench "$model" --provider cuda --no-fold --iters 30 --json > "$LOGS/resnet50-cuda-nofold.json" 2>&1
    # Every light model, CUDA and CPU, one JSON line each.
    for m in target/corpus/onnx-1.23.2/light/test_*/model.onnx; do
      timeout 60 "$B/quorum" bench "$m" --provider cuda --iters 20 --json 2>&1 | head -c 2000
      echo
      timeout 30 "$B/quorum" bench "$m" --provider cpu --iters 5 --warmup 1 --json 2>&1 | head -c 2000
      echo
    done > "$LOGS/light-models.jsonl"
  fi
fi
if want wgpu-models; then
  # Every light model on wgpu (this machine's Vulkan adapter) and on CUDA, one JSON line each:
  # latency, then a profiled run's device kernel time per op (timestamp queries).
  [ -d target/corpus/onnx-1.23.2/light ] || timeout 120 "$B/conformance" --engine cpu --filter 'light/test_squeezenet' --no-report > "$LOGS/corpus.log" 2>&1
  export QUORUM_WGPU_ADAPTER="${QUORUM_WGPU_ADAPTER:-NVIDIA}"
  for m in target/corpus/onnx-1.23.2/light/test_*/model.onnx; do
    for p in wgpu cuda; do
      timeout 60 "$B/quorum" bench "$m" --provider $p --iters 20 --json 2>&1 | head -c 3000
      echo
    done
    timeout 60 "$B/quorum" bench "$m" --provider wgpu --profile --iters 5 --json 2>&1 | head -c 6000
    echo
  done > "$LOGS/light-models-wgpu.jsonl"
fi
if want pytorch; then
  # PyTorch (eager, graph replay, host to host) beside Quorum (1 stream, several, graph replay) on
  # the models of issue 16's table exported here and the corpus's light models (PyTorch runs those
  # through benches/gpu/onnx_torch.py); host overhead per node; streams on light models;
  # threads. PYTORCH_ARGS adds options (e.g. "--ncu bert_base,vit_small" for kernel shares).
  timeout 540 python3 benches/gpu/models_vs_pytorch.py --quorum "$B/quorum" --out "$LOGS/models" --extras ${PYTORCH_ARGS:-} > "$LOGS/pytorch.log" 2>&1
  echo "rc=$?" >> "$LOGS/pytorch.log"
fi
if want fuzz; then
  # The stream fuzzer: random DAGs on random streams, threads, graph capture and spin delays; every
  # result against one stream, every command log through the happens-before checker.
  QUORUM_FUZZ_SECONDS="${FUZZ_SECONDS:-60}" timeout 600 "$B/gpu-tests" --ignored --exact fuzz_streams::fuzz_streams --nocapture --test-threads=1 > "$LOGS/fuzz.log" 2>&1
  echo "rc=$?" >> "$LOGS/fuzz.log"
fi
if want mutants; then
  # Needs a bundle built with `cargo xtask gpu-bundle --mutants`.
  QUORUM_FUZZ_SECONDS="${MUTANT_SECONDS:-20}" timeout 600 "$B/gpu-tests" --ignored --exact fuzz_streams::fuzz_streams_mutants --nocapture --test-threads=1 > "$LOGS/mutants.log" 2>&1
  echo "rc=$?" >> "$LOGS/mutants.log"
fi
if want sanitizer; then
  # compute-sanitizer's memcheck, racecheck and synccheck over the CUDA cases that use several
  # streams, graph capture and the big tiles (SANITIZER_FILTER picks others), each tool its own
  # time limit (SANITIZER_SECONDS; SANITIZER_TOOLS picks tools); a tool cut off by its limit
  # says so in its log (rc=124).
  for tool in ${SANITIZER_TOOLS:-memcheck racecheck synccheck}; do
    timeout "${SANITIZER_SECONDS:-40}" compute-sanitizer --tool "$tool" --print-limit 20 \
      "$B/gpu-tests" --test-threads=1 ${SANITIZER_FILTER:-streams::} > "$LOGS/sanitizer-$tool.log" 2>&1
    echo "rc=$?" >> "$LOGS/sanitizer-$tool.log"
  done
fi
if want wgpu; then
  # The wgpu engine over the corpus on this machine's Vulkan adapter (the loader packages unpacked
  # from .gpu/gl), after the cuda engine or the models step generated the corpus.
  QUORUM_WGPU_ADAPTER="${QUORUM_WGPU_ADAPTER:-NVIDIA}" timeout "${WGPU_TIMEOUT:-300}" "$B/conformance" --engine wgpu --jobs 8 > "$LOGS/conformance-wgpu.log" 2>&1
  echo "rc=$?" >> "$LOGS/conformance-wgpu.log"
  cp -f reports/conformance/wgpu.json "$LOGS/" 2>/dev/null
fi
if want conformance; then
  timeout 420 "$B/conformance" --engine cuda --jobs 8 > "$LOGS/conformance-cuda.log" 2>&1
  echo "rc=$?" >> "$LOGS/conformance-cuda.log"
  cp -f reports/conformance/cuda.json "$LOGS/" 2>/dev/null
fi
if want audit; then
  QUORUM_AUDIT_LAUNCHES=1 timeout "${AUDIT_TIMEOUT:-300}" "$B/conformance" --engine cuda --jobs 8 --no-report --filter "${AUDIT_FILTER:-^node/}" > "$LOGS/audit.log" 2>&1
  echo "rc=$?" >> "$LOGS/audit.log"
fi
if want strict; then
  # One strictly verified run per model, wall clock, beside one unverified run (issue 38's goal).
  timeout "${STRICT_TIMEOUT:-560}" python3 benches/gpu/strict_timings.py --quorum "$B/quorum" --out "$LOGS/strict" > "$LOGS/strict.log" 2>&1
  echo "rc=$?" >> "$LOGS/strict.log"
  rm -rf "$LOGS/strict/work"
fi
if want nightly; then
  # The corpus (for the light models' shapes) is generated by the models or conformance steps,
  # or here. NIGHTLY_ARGS=--quick for a short run; the deadline keeps the call inside its limit.
  [ -d target/corpus/onnx-1.23.2/light ] || timeout 120 "$B/conformance" --engine cpu --filter 'light/test_squeezenet' --no-report > "$LOGS/corpus.log" 2>&1
  timeout "${NIGHTLY_TIMEOUT:-540}" "$B/quorum-matrix" nightly ${NIGHTLY_ARGS:-} --deadline-s "${NIGHTLY_DEADLINE:-330}" --corpus target/corpus/onnx-1.23.2 --out "$LOGS/nightly" > "$LOGS/nightly.log" 2>&1
  echo "rc=$?" >> "$LOGS/nightly.log"
  mkdir -p "$LOGS/nightly/conformance"
  [ -f reports/conformance/cuda.json ] && cp -f reports/conformance/cuda.json "$LOGS/nightly/conformance/"
  # Issue 16's model table, when this call ran the pytorch step too: the nightly page links it.
  [ -f "$LOGS/models/models-vs-pytorch.md" ] && cp -f "$LOGS/models/models-vs-pytorch.md" "$LOGS/nightly/"
  m="target/corpus/onnx-1.23.2/light/test_resnet50/model.onnx"
  [ -f "$m" ] && QUORUM_THRESHOLDS="$LOGS/nightly/thresholds" timeout 60 "$B/quorum" info "$m" > "$LOGS/nightly/info-resnet50-auto.txt" 2>&1
fi

echo "== summary =="
[ -f "$LOGS/fuzz.log" ] && grep -oE "FUZZ .*|panicked.*|^rc=.*" "$LOGS/fuzz.log" | head -5
[ -f "$LOGS/mutants.log" ] && grep -oE "MUTANT .*|panicked.*|^rc=.*" "$LOGS/mutants.log" | head -20
[ -f "$LOGS/models/models-vs-pytorch.md" ] && cat "$LOGS/models/models-vs-pytorch.md"
echo "device: $(cat "$LOGS/device.txt")"
[ -f "$LOGS/strict.log" ] && { cat "$LOGS/strict/strict-timings.md" 2>/dev/null; grep -E '^rc=|Error|error' "$LOGS/strict.log" | head -5; }
if [ -f "$LOGS/gpu-tests.log" ]; then
  echo "gpu-tests: $(grep -E '^test result|^rc=' "$LOGS/gpu-tests.log" | tr '\n' ' ')"
  grep -E '^---- |panicked at' -A1 "$LOGS/gpu-tests.log" | grep -v '^--$' | cut -c1-400 | head -60
fi
[ -f "$LOGS/bench.log" ] && { grep -E '^BENCH|^rc=' "$LOGS/bench.log" || tail -20 "$LOGS/bench.log"; }
for tool in memcheck racecheck synccheck; do
  [ -f "$LOGS/sanitizer-$tool.log" ] && echo "sanitizer $tool: $(grep -E 'ERROR SUMMARY|^test result|^rc=' "$LOGS/sanitizer-$tool.log" | tr '\n' ' ')"
done
if [ -f "$LOGS/conformance-wgpu.log" ]; then
  echo "conformance wgpu:"
  grep -E '\*\*all\*\*|^rc=|UNEXPECTED' "$LOGS/conformance-wgpu.log" | head -12
  tail -4 "$LOGS/conformance-wgpu.log"
fi
if [ -f "$LOGS/conformance-cuda.log" ]; then
  echo "conformance cuda:"
  # How this machine's Python differs from conformance/corpus/requirements.lock (reported, not fatal).
  grep -E '^WARNING' "$LOGS/conformance-cuda.log" | head -3
  grep -E '\*\*all\*\*|^rc=' "$LOGS/conformance-cuda.log" | head -5
  tail -4 "$LOGS/conformance-cuda.log"
fi
if [ -f "$LOGS/audit.log" ]; then
  echo "launch audit (cuda, corpus node tests):"
  grep -E '\*\*all\*\*|^rc=|launch audit' "$LOGS/audit.log" | cut -c1-400 | head -20
  tail -4 "$LOGS/audit.log"
fi
if [ -f "$LOGS/light-models-wgpu.jsonl" ]; then
  echo "light models, wgpu / cuda median ms; wgpu's top device ops (ms per run):"
  python3 - "$LOGS/light-models-wgpu.jsonl" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        if line.strip():
            print("  (not JSON)", line.strip()[:200])
        continue
    name = j["model"].split("/")[-2]
    r = rows.setdefault(name, {})
    if j.get("device_profile"):
        r["top"] = ", ".join(f'{d["op"]} {d["device_ms_per_run"]:.3f}' for d in j["device_profile"][:4])
        r["kernels"] = sum(d["device_ms_per_run"] for d in j["device_profile"])
    else:
        r[j["provider"].split(" ")[0]] = j["median_ms"]
for name, r in sorted(rows.items()):
    print(f'  {name:<16} wgpu {r.get("wgpu", float("nan")):8.3f}  cuda {r.get("cuda", float("nan")):7.3f}  '
          f'wgpu kernels {r.get("kernels", float("nan")):7.3f}: {r.get("top", "")}')
PY
fi
[ -f "$LOGS/resnet50-cuda.json" ] && echo "resnet50: $(head -c 700 "$LOGS/resnet50-cuda.json")"
[ -f "$LOGS/resnet50-cuda-nofold.json" ] && echo "resnet50 no-fold: $(head -c 700 "$LOGS/resnet50-cuda-nofold.json")"
[ -f "$LOGS/squeezenet-strict.json" ] && echo "squeezenet strict: $(head -c 700 "$LOGS/squeezenet-strict.json")"
[ -f "$LOGS/resnet50-auto.json" ] && echo "resnet50 auto: $(head -c 300 "$LOGS/resnet50-auto.json")"
if [ -f "$LOGS/nightly.log" ]; then
  echo "nightly: $(grep -E '^rc=|^nightly measurements|^auto slower' "$LOGS/nightly.log" | tr '\n' ' ')"
  ls "$LOGS/nightly/thresholds" 2>/dev/null
fi
exit 0
