#!/usr/bin/env node
// Runs an ONNX model on Quorum's WebAssembly build, like `quorum run` does natively:
//
//   node wasm/examples/run-model.mjs MODEL.onnx [--input NAME=FILE]... [--output-dir DIR] [--wasm FILE]
//
// FILE is .npy or a serialized TensorProto (.pb); every output is written to DIR as NAME.npy (or
// NAME.pb where numpy has no dtype for it), with the file stems `quorum run` uses (the module gives
// them), and summarised on stdout. The module defaults to target/wasm/wasm32-unknown-unknown/release/quorum_wasm.wasm
// (built by `cargo xtask wasm`).
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { init, InferenceSession, Tensor, toNpy, fromNpy } from "../js/quorum.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
let model;
let outDir = ".";
let wasmPath = join(here, "../../target/wasm/wasm32-unknown-unknown/release/quorum_wasm.wasm");
const inputs = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  const value = () => {
    if (i + 1 >= args.length) usage(`${a} needs a value`);
    return args[++i];
  };
  if (a === "--input") inputs.push(value());
  else if (a === "--output-dir") outDir = value();
  else if (a === "--wasm") wasmPath = value();
  else if (a.startsWith("--")) usage(`unknown option ${a}`);
  else if (model === undefined) model = a;
  else usage(`a second model ${a}`);
}
if (model === undefined) usage("no model given");

function usage(msg) {
  console.error(`error: ${msg}\nusage: run-model.mjs MODEL.onnx [--input NAME=FILE]... [--output-dir DIR] [--wasm FILE]`);
  process.exit(2);
}

try {
  await init(readFileSync(wasmPath));
  const session = await InferenceSession.create(readFileSync(model));
  const feeds = {};
  for (const spec of inputs) {
    const eq = spec.indexOf("=");
    if (eq < 0) usage(`--input ${spec}: expected NAME=FILE`);
    const bytes = new Uint8Array(readFileSync(spec.slice(eq + 1)));
    feeds[spec.slice(0, eq)] = spec.endsWith(".npy")
      ? fromNpy(bytes)
      : new Tensor("onnx-protobuf", bytes, []);
  }
  const missing = session.inputNames.filter((n) => !(n in feeds));
  if (missing.length) usage(`no value for input(s) ${missing.join(", ")}`);
  const started = performance.now();
  const out = await session.run(feeds);
  const ms = performance.now() - started;
  mkdirSync(outDir, { recursive: true });
  const names = Object.keys(out);
  names.forEach((name) => {
    const t = out[name];
    const isPb = t.type === "onnx-protobuf";
    const file = join(outDir, `${t.fileStem}.${isPb ? "pb" : "npy"}`);
    writeFileSync(file, isPb ? t.data : toNpy(t));
    console.log(`${name}: ${t.type} [${t.dims.join(", ")}] -> ${file}`);
  });
  console.log(`ran in ${ms.toFixed(2)} ms`);
  await session.release();
} catch (e) {
  console.error(`error: ${e.message}`);
  process.exit(1);
}
