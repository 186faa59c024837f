#!/usr/bin/env bash
# Runs Quorum's on-device checks on a GPU machine without a Rust toolchain, from the project root that
# holds target/gpu-bundle (see shared/gpu/README.md): the gpu-tests suite, the device benchmarks, and
# the `cuda` conformance engine over the corpus (generated here with this machine's onnx). Logs go to
# $OUT (or target/gpu-bundle/logs) and a short summary table ends the output.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
B="$ROOT/target/gpu-bundle"
LOGS="${OUT:-$B/logs}"
mkdir -p "$LOGS"
export QUORUM_ROOT="$ROOT"
export QUORUM_PYTHON="${QUORUM_PYTHON:-python3}"
cd "$ROOT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$LOGS/device.txt" 2>&1

"$B/gpu-tests" --test-threads=4 > "$LOGS/gpu-tests.log" 2>&1
tests_rc=$?
"$B/gpu-tests" --ignored bench_kernels --nocapture > "$LOGS/bench.log" 2>&1
bench_rc=$?
"$B/conformance" --engine cuda --jobs 8 > "$LOGS/conformance-cuda.log" 2>&1
conf_rc=$?
cp -f reports/conformance/cuda.json "$LOGS/" 2>/dev/null
# light_resnet50 end to end through the CLI (transfers included).
model="target/corpus/onnx-1.23.2/light/light_resnet50/model.onnx"
if [ -f "$model" ]; then
  "$B/quorum" bench "$model" --provider cuda --iters 30 --json > "$LOGS/resnet50-cuda.json" 2>&1
  "$B/quorum" bench "$model" --provider cuda --verify strict --iters 3 --json > "$LOGS/resnet50-strict.json" 2>&1
fi

echo "== summary =="
echo "device: $(cat "$LOGS/device.txt")"
echo "gpu-tests (rc $tests_rc): $(grep -E '^test result' "$LOGS/gpu-tests.log" | tail -1)"
grep -E '^test .* FAILED|^---- ' "$LOGS/gpu-tests.log" | head -20
grep -E '^BENCH' "$LOGS/bench.log" || { echo "bench (rc $bench_rc):"; tail -5 "$LOGS/bench.log"; }
echo "conformance cuda (rc $conf_rc):"
grep -E '^\| \*\*all\*\*|^unexpected|UNEXPECTED' "$LOGS/conformance-cuda.log" | head -10
tail -3 "$LOGS/conformance-cuda.log"
[ -f "$LOGS/resnet50-cuda.json" ] && echo "resnet50: $(cat "$LOGS/resnet50-cuda.json" | head -c 600)"
[ -f "$LOGS/resnet50-strict.json" ] && echo "resnet50 strict: $(head -c 400 "$LOGS/resnet50-strict.json")"
