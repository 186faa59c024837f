// Quorum's CPU runtime in WebAssembly, with onnxruntime-web's shapes:
//
//   import { init, InferenceSession, Tensor } from "./quorum.mjs";
//   await init(wasmBytes);                        // the quorum_wasm.wasm module's bytes
//   const session = await InferenceSession.create(modelBytes);
//   const out = await session.run({ x: new Tensor("float32", data, [1, 3]) });
//   out.y.data, out.y.dims, out.y.type
//
// Values cross into the module as .npy bytes (written and read here) or as ONNX protobuf
// (TensorProto bytes given as `Tensor("onnx-protobuf", bytes, [])`); outputs numpy has no dtype for
// (bfloat16, float8, int4, sequences, optionals) come back the same way. Works in node and in
// browsers (no imports, no file system).

let wasm = null;

/** Instantiates the module once; later calls return the same exports. */
export async function init(source) {
  if (wasm) return wasm;
  const imports = { quorum: { now_ms: () => performance.now() } };
  const { instance } =
    source instanceof WebAssembly.Module
      ? { instance: await WebAssembly.instantiate(source, imports) }
      : await WebAssembly.instantiate(source, imports);
  wasm = instance.exports;
  return wasm;
}

function exportsOrThrow() {
  if (!wasm) throw new Error("quorum: call init(wasmBytes) first");
  return wasm;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The bytes the last call handed back (copied out: the module's memory may move). */
function buffer(len) {
  const w = exportsOrThrow();
  return new Uint8Array(w.memory.buffer, w.quorum_buffer_ptr(), len).slice();
}

/** A call's result, or the module's error message (left in its buffer) thrown as a QuorumError. */
function check(result) {
  if (result < 0) throw new QuorumError(decoder.decode(buffer(exportsOrThrow().quorum_buffer_len())));
  return result;
}

export class QuorumError extends Error {
  constructor(message) {
    super(message);
    this.name = "QuorumError";
  }
}

/** Copies `bytes` into module memory for one call; `f(ptr, len)`; frees it after. */
function withBytes(bytes, f) {
  const w = exportsOrThrow();
  if (bytes.length === 0) return f(0, 0);
  const ptr = w.quorum_alloc(bytes.length);
  if (ptr === 0) throw new QuorumError(`cannot allocate ${bytes.length} bytes in the module`);
  try {
    new Uint8Array(w.memory.buffer, ptr, bytes.length).set(bytes);
    return f(ptr, bytes.length);
  } finally {
    w.quorum_dealloc(ptr, bytes.length);
  }
}

// ----- .npy -----

const NPY = {
  float32: ["<f4", Float32Array],
  float64: ["<f8", Float64Array],
  float16: ["<f2", Uint16Array], // raw IEEE half bits
  int8: ["|i1", Int8Array],
  uint8: ["|u1", Uint8Array],
  int16: ["<i2", Int16Array],
  uint16: ["<u2", Uint16Array],
  int32: ["<i4", Int32Array],
  uint32: ["<u4", Uint32Array],
  int64: ["<i8", BigInt64Array],
  uint64: ["<u8", BigUint64Array],
  bool: ["|b1", Uint8Array],
};
const BY_DESCR = Object.fromEntries(Object.entries(NPY).map(([t, [d]]) => [d, t]));

/** A tensor as version 1 .npy bytes. */
export function toNpy(tensor) {
  const shape = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(", ")})`;
  let descr;
  let body;
  if (tensor.type === "string") {
    // numpy unicode: UTF-32LE code points, every element padded to the longest.
    const points = tensor.data.map((s) => Array.from(s, (c) => c.codePointAt(0)));
    const width = Math.max(1, ...points.map((p) => p.length));
    const u = new Uint32Array(points.length * width);
    points.forEach((p, i) => u.set(p, i * width));
    descr = `<U${width}`;
    body = new Uint8Array(u.buffer);
  } else {
    const entry = NPY[tensor.type];
    if (!entry) throw new QuorumError(`tensor type '${tensor.type}' has no .npy form`);
    descr = entry[0];
    const d = tensor.type === "bool" ? Uint8Array.from(tensor.data, (b) => (b ? 1 : 0)) : tensor.data;
    body = new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
  }
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const total = 10 + header.length + 1;
  header += " ".repeat((64 - (total % 64)) % 64) + "\n";
  const out = new Uint8Array(10 + header.length + body.length);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0]);
  new DataView(out.buffer).setUint16(8, header.length, true);
  out.set(encoder.encode(header), 10);
  out.set(body, 10 + header.length);
  return out;
}

/** A tensor from .npy bytes (versions 1 to 3, C order, little-endian). */
export function fromNpy(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 10 || bytes[0] !== 0x93 || decoder.decode(bytes.subarray(1, 6)) !== "NUMPY") {
    throw new QuorumError("not a .npy file");
  }
  const major = bytes[6];
  const [hlen, start] = major === 1 ? [view.getUint16(8, true), 10] : [view.getUint32(8, true), 12];
  const header = decoder.decode(bytes.subarray(start, start + hlen));
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header)?.[1];
  if (descr === undefined || shapeText === undefined || /'fortran_order':\s*True/.test(header)) {
    throw new QuorumError(`unsupported .npy header ${header.trim()}`);
  }
  const dims = shapeText.split(",").map((s) => s.trim()).filter((s) => s).map(Number);
  const count = dims.reduce((a, b) => a * b, 1);
  const body = bytes.slice(start + hlen); // copied: aligned, and free of the module's memory
  const unicode = /^<U(\d+)$/.exec(descr);
  if (unicode) {
    const width = Number(unicode[1]);
    const u = new Uint32Array(body.buffer, 0, count * width);
    const data = [];
    for (let i = 0; i < count; i++) {
      const cps = Array.from(u.subarray(i * width, (i + 1) * width)).filter((c) => c !== 0);
      data.push(String.fromCodePoint(...cps));
    }
    return new Tensor("string", data, dims);
  }
  const type = BY_DESCR[descr];
  if (!type) throw new QuorumError(`.npy dtype ${descr} is not supported here`);
  const Ctor = NPY[type][1];
  const data = new Ctor(body.buffer, 0, count);
  return new Tensor(type, type === "bool" ? Array.from(data, (b) => b !== 0) : data, dims);
}

// ----- the API -----

export class Tensor {
  /** `type`: float32, int64, bool, string..., or "onnx-protobuf" (data: the serialized bytes). */
  constructor(type, data, dims) {
    this.type = type;
    // A plain array becomes the type's typed array (int64 and uint64 through BigInt).
    if (Array.isArray(data) && type !== "string" && type !== "bool" && NPY[type]) {
      const Ctor = NPY[type][1];
      data = Ctor === BigInt64Array || Ctor === BigUint64Array ? Ctor.from(data, BigInt) : Ctor.from(data);
    }
    this.data = data;
    this.dims = dims ?? [data.length];
    this.size = this.dims.reduce((a, b) => a * b, 1);
  }
}

export class InferenceSession {
  #handle;
  constructor(handle, io) {
    this.#handle = handle;
    this.inputMetadata = io.inputs;
    this.outputMetadata = io.outputs;
    this.inputNames = io.inputs.map((i) => i.name);
    this.outputNames = io.outputs.map((o) => o.name);
  }

  /** Loads a model from its bytes. Options: dims (symbol → value), optimize, fold_constants, arena. */
  static async create(model, options = {}) {
    const w = exportsOrThrow();
    const bytes = model instanceof Uint8Array ? model : new Uint8Array(model);
    const opts = encoder.encode(JSON.stringify(options));
    const handle = withBytes(bytes, (mp, ml) =>
      withBytes(opts, (op, ol) => check(w.quorum_session_new(mp, ml, op, ol))),
    );
    const io = JSON.parse(decoder.decode(buffer(check(w.quorum_session_io(handle)))));
    return new InferenceSession(handle, io);
  }

  /** One run; `feeds` maps input names to Tensors. Resolves to output name → Tensor. */
  async run(feeds) {
    const w = exportsOrThrow();
    for (const [name, tensor] of Object.entries(feeds)) {
      const value = tensor.type === "onnx-protobuf" ? tensor.data : toNpy(tensor);
      withBytes(encoder.encode(name), (np, nl) =>
        withBytes(value, (vp, vl) => check(w.quorum_feed(this.#handle, np, nl, vp, vl))),
      );
    }
    const n = check(w.quorum_run(this.#handle));
    const out = {};
    for (let k = 0; k < n; k++) {
      const bytes = buffer(check(w.quorum_output(this.#handle, k)));
      const nl = bytes.indexOf(10);
      const head = JSON.parse(decoder.decode(bytes.subarray(0, nl)));
      const body = bytes.subarray(nl + 1);
      const t = head.format === "npy" ? fromNpy(body) : new Tensor("onnx-protobuf", body, []);
      // The file name `quorum run` gives this output (unique among the run's outputs).
      t.fileStem = head.stem;
      out[head.name] = t;
    }
    return out;
  }

  /** Frees the session's memory in the module. */
  async release() {
    check(exportsOrThrow().quorum_session_free(this.#handle));
  }
}
