#!/usr/bin/env bash
# One decode step of GPT-2-small (benches/zoo/decoder.py, exported here) with a cache of 64
# positions, through `quorum bench --provider cuda --profile`, eager and with graph capture: where a
# token's time goes (host ops, kernel time per op, uploads and downloads in the counters).
#   bash benches/gpu/decoder_step_profile.sh   (from the root, with target/gpu-bundle/quorum unpacked)
set -e
python3 benches/zoo/decoder.py /tmp/g --size small --prompt-len 8 --new-tokens 2 2>&1 | grep -v -i warn | tail -1
python3 - <<'PY'
import numpy as np, os
os.makedirs('/tmp/in', exist_ok=True)
np.save('/tmp/in/ids.npy', np.array([[5]], np.int64))
np.save('/tmp/in/mask.npy', np.ones((1,65), np.int64))
for i in range(12):
  for kv in ('key','value'):
    np.save(f'/tmp/in/p{i}{kv}.npy', np.random.randn(1,12,64,64).astype(np.float32))
PY
IN="--input input_ids=/tmp/in/ids.npy --input attention_mask=/tmp/in/mask.npy"
for i in $(seq 0 11); do for kv in key value; do IN="$IN --input past_key_values.$i.$kv=/tmp/in/p$i$kv.npy"; done; done
Q=target/gpu-bundle/quorum
for g in off on; do
  $Q bench /tmp/g/model.onnx --provider cuda --graph $g --iters 50 --warmup 5 --profile --json $IN > /tmp/b_$g.json
  python3 - /tmp/b_$g.json <<'PY'
import json,sys
j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print("graph", j["graph_capture"], "median", round(j["median_ms"],3), "p10", round(j["p10_ms"],3), "blocker", j["capture_blocker"], "graphs", [g["state"] for g in j["graphs"]])
c=j["counters"]; print({k:v for k,v in c.items() if isinstance(v,(int,float)) and v})
for p in j["profile"][:8]: print(" host", p)
dp=sorted(j["device_profile"], key=lambda p:-p["device_ms_per_run"])[:8]
print(" device total ms", round(sum(p["device_ms_per_run"] for p in j["device_profile"]),3))
for p in dp: print(" dev", p)
PY
done
