// The wrapper's .npy codec on its own (no module needed): every dtype and plain-array input round
// trips with its type, shape and values; a bad file is refused. Run by runtime/tests/wasm_node.rs
// (`node wasm/js/codec.test.mjs`; exit status 0 when every check holds).
import assert from "node:assert/strict";
import { Tensor, toNpy, fromNpy, QuorumError } from "./quorum.mjs";

const cases = [
  ["float32", new Float32Array([1.5, -2, 3.25, 1e-30]), [2, 2]],
  ["float64", [Math.PI, -0, 1e300], [3]],
  ["float16", new Uint16Array([0x3c00, 0xc000]), [2]],
  ["int8", [-128, 127, 5], [3]],
  ["uint8", [0, 255], [2, 1]],
  ["int16", [-30000, 2], [2]],
  ["uint16", [65535, 1], [2]],
  ["int32", [-(2 ** 31), 2 ** 31 - 1], [2]],
  ["uint32", [2 ** 32 - 1, 0], [2]],
  ["int64", [-(2 ** 53), 2 ** 53, 7], [3]],
  ["uint64", [2 ** 60, 1], [2]],
  ["bool", [true, false, true], [3]],
  ["string", ["", "a", "grüße", "𝄞x"], [2, 2]],
  ["float32", new Float32Array([]), [0, 4]],
  ["float32", new Float32Array([7]), []],
];
for (const [type, data, dims] of cases) {
  const t = new Tensor(type, data, dims);
  const back = fromNpy(toNpy(t));
  assert.equal(back.type, type);
  assert.deepEqual(back.dims, dims);
  assert.deepEqual(Array.from(back.data), Array.from(t.data), `${type} ${dims}`);
}
// A 64-bit value beyond 2^53 survives exactly.
const big = fromNpy(toNpy(new Tensor("int64", new BigInt64Array([(1n << 60n) + 1n]), [1])));
assert.equal(big.data[0], (1n << 60n) + 1n);

// What must be refused: not .npy, Fortran order, an unknown dtype, a type with no .npy form.
const good = toNpy(new Tensor("float32", [1, 2], [2]));
const bent = (f) => {
  const b = good.slice();
  f(b);
  return b;
};
assert.throws(() => fromNpy(bent((b) => (b[1] = 0x41))), QuorumError);
const header = new TextDecoder().decode(good.subarray(10, 10 + good[8]));
const swap = (from, to) => {
  const h = header.replace(from, to).padEnd(header.length);
  const b = good.slice();
  b.set(new TextEncoder().encode(h), 10);
  return b;
};
assert.throws(() => fromNpy(swap("False", "True ")), QuorumError);
assert.throws(() => fromNpy(swap("<f4", "<c8")), QuorumError);
assert.throws(() => toNpy(new Tensor("bfloat16", new Uint16Array(1), [1])), QuorumError);
console.log(`codec: ${cases.length} round trips, 4 refusals`);
