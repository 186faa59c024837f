//! The tiled GEMM template that MatMul, Gemm and the convolutions share (WGSL text), and its dispatch.
//!
//! A 16×16 workgroup computes a T×T tile of C (T = 128 for large products, 64 otherwise), each
//! thread an (T/16)×(T/16) block held in vec4 registers: rows `g·64 + ty·4 + i`, columns
//! `h·64 + tx·4 + j`, so that the sixteen threads of a row read consecutive vec4s of B and the
//! rows of a warp read one broadcast vec4 of A. K is walked in steps of BK = 1024 / T through
//! workgroup memory, both operands stored k-major as vec4s (A's rows padded by one vec4 so that its
//! transposing stores do not collide in a bank). The next step's operands are loaded into registers
//! while the current step computes (one barrier pair per step). Every full step is unrolled in the
//! generated text, the accumulators are named variables, so no compiler has to prove an index
//! constant to keep them in registers.
//!
//! Operands are read through per-op functions (`loadA(m, k)`, `loadB(k, n)`, `storeC(m, n, acc)`
//! after `setup(batch)`), so a convolution's im2col is an index computation in the tile load, never
//! a buffer. Each C element is one f32 sum over k in order, one `fma` per term (16-bit operands
//! widened exactly, the result rounded once); a partial last step runs only its own k.
use crate::memory::WTensor;
use crate::run::{KResult, Run};
use crate::wgsl;
use quorum_core::tensor::DType;

use super::decline;

/// Rows and columns of C per workgroup, and the depth of one step through workgroup memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    pub t: u32,
}

impl Tile {
    pub const SMALL: Tile = Tile { t: 64 };
    pub const LARGE: Tile = Tile { t: 128 };

    /// K per step: the workgroup's 256 threads load one vec4 of each operand per step.
    pub fn bk(self) -> u32 {
        1024 / self.t
    }

    /// The tile for `batch` products of M×N: the large one only where it still gives the device
    /// several workgroups per multiprocessor-sized share (a 1024² product keeps 256 small tiles
    /// rather than 64 large ones).
    pub fn for_shape(m: usize, n: usize, batch: usize) -> Tile {
        let large = m.div_ceil(128) * n.div_ceil(128) * batch;
        if m >= 256 && n >= 256 && large >= 256 {
            Tile::LARGE
        } else {
            Tile::SMALL
        }
    }
}

/// The tiled GEMM main over `setup`, `loadA`, `loadB` and `storeC` defined in `ops` (WGSL text).
/// `P[0..3]` are M, N, K; the op's own parameters start at `P[4]`.
pub fn gemm_source(ops: &str, dtypes: &[DType], outs: usize, ins: usize, tile: Tile) -> String {
    let half = if wgsl::needs_half(dtypes) {
        wgsl::HALF
    } else {
        ""
    };
    let t = tile.t;
    let bk = tile.bk();
    let groups = t / 64; // vec4 groups per thread along each of M and N
    let sa = t / 4 + 1; // vec4s per k-row of A in workgroup memory (one pad)
    let sb = t / 4;
    let mut decl = String::new();
    for g in 0..groups {
        for i in 0..4 {
            for h in 0..groups {
                decl.push_str(&format!("  var c{g}{i}{h} = vec4<f32>(0.0);\n"));
            }
        }
    }
    // One k of the block: A's vec4s (rows), B's vec4s (columns), 4·groups² vec4 FMAs.
    let step = |kk: &str| {
        let mut s = String::new();
        for g in 0..groups {
            s.push_str(&format!(
                "    let a{g} = As[{kk} * {sa}u + {}u + lid.y];\n",
                g * 16
            ));
        }
        for h in 0..groups {
            s.push_str(&format!(
                "    let b{h} = Bs[{kk} * {sb}u + {}u + lid.x];\n",
                h * 16
            ));
        }
        for g in 0..groups {
            for i in 0..4 {
                for h in 0..groups {
                    s.push_str(&format!(
                        "    c{g}{i}{h} = fma(vec4<f32>(a{g}[{i}]), b{h}, c{g}{i}{h});\n"
                    ));
                }
            }
        }
        s
    };
    let mut full = String::new();
    for kk in 0..bk {
        full.push_str("  {\n");
        full.push_str(&step(&format!("{kk}u")));
        full.push_str("  }\n");
    }
    let tail = step("kk");
    let mut store = String::new();
    for g in 0..groups {
        for i in 0..4 {
            for h in 0..groups {
                for (j, c) in ["x", "y", "z", "w"].iter().enumerate() {
                    store.push_str(&format!(
                        "  put(m0 + {}u + lid.y * 4u, n0 + {}u + lid.x * 4u + {j}u, c{g}{i}{h}.{c});\n",
                        g * 64 + i,
                        h * 64
                    ));
                }
            }
        }
    }
    format!(
        r#"{header}{half}
var<workgroup> As: array<vec4<f32>, {asz}>;
var<workgroup> Bs: array<vec4<f32>, {bsz}>;
{ops}
fn ldA(m: u32, k: u32) -> f32 {{
  if (m < P[0] && k < P[2]) {{ return loadA(m, k); }}
  return 0.0;
}}
fn ldB(k: u32, n: u32) -> f32 {{
  if (k < P[2] && n < P[1]) {{ return loadB(k, n); }}
  return 0.0;
}}
fn put(m: u32, n: u32, v: f32) {{
  if (m < P[0] && n < P[1]) {{ storeC(m, n, v); }}
}}
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {{
  let K = P[2];
  setup(wid.z);
  let m0 = wid.y * {t}u;
  let n0 = wid.x * {t}u;
  let tid = lid.y * 16u + lid.x;
  // This thread's share of each step: A rows ma..ma+3 at k = ka; B row kb, columns nb..nb+3.
  let ka = tid % {bk}u;
  let ma = (tid / {bk}u) * 4u;
  let kb = tid / {sb}u;
  let nb = (tid % {sb}u) * 4u;
  let sta = ka * {sa}u + tid / {bk}u;
  let stb = kb * {sb}u + tid % {sb}u;
{decl}  var ra = vec4<f32>(ldA(m0 + ma, ka), ldA(m0 + ma + 1u, ka), ldA(m0 + ma + 2u, ka), ldA(m0 + ma + 3u, ka));
  var rb = vec4<f32>(ldB(kb, n0 + nb), ldB(kb, n0 + nb + 1u), ldB(kb, n0 + nb + 2u), ldB(kb, n0 + nb + 3u));
  for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{
    As[sta] = ra;
    Bs[stb] = rb;
    workgroupBarrier();
    let k1 = k0 + {bk}u;
    if (k1 < K) {{
      ra = vec4<f32>(ldA(m0 + ma, k1 + ka), ldA(m0 + ma + 1u, k1 + ka), ldA(m0 + ma + 2u, k1 + ka), ldA(m0 + ma + 3u, k1 + ka));
      rb = vec4<f32>(ldB(k1 + kb, n0 + nb), ldB(k1 + kb, n0 + nb + 1u), ldB(k1 + kb, n0 + nb + 2u), ldB(k1 + kb, n0 + nb + 3u));
    }}
    if (k1 <= K) {{
{full}    }} else {{
      let kn = K - k0;
      for (var kk = 0u; kk < kn; kk = kk + 1u) {{
{tail}      }}
    }}
    workgroupBarrier();
  }}
{store}}}
"#,
        header = wgsl::header(outs, ins),
        asz = bk * sa,
        bsz = bk * sb,
    )
}

/// Dispatches a GEMM of `batch` products of M×K by K×N, the template over `ops` (see
/// [`gemm_source`]); `dtypes` are the operands' element types (for the 16-bit helpers).
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    run: &Run,
    name: &str,
    ops: &str,
    dtypes: &[DType],
    outs: &[&WTensor],
    ins: &[&WTensor],
    (m, n, k, batch): (usize, usize, usize, usize),
    extra: Vec<u32>,
) -> KResult<()> {
    let tile = Tile::for_shape(m, n, batch);
    // The K loop's steps, and the partial last step's own loop (full steps are unrolled).
    let bk = tile.bk() as usize;
    super::loop_budget(run, name, k.div_ceil(bk) + bk)?;
    let max = run.device.limits.max_compute_workgroups_per_dimension as usize;
    let (gx, gy) = (n.div_ceil(tile.t as usize), m.div_ceil(tile.t as usize));
    if gx > max || gy > max || batch > max {
        decline!("a GEMM of {batch}×{m}×{n} exceeds the adapter's dispatch limits");
    }
    for v in [m, n, k, batch] {
        // Indices within a tile reach m + T and k + BK: keep them clear of u32 wrap-around.
        if u32::try_from(v + 1024).is_err() {
            decline!("GEMM dims beyond 32 bits");
        }
    }
    // The template's text is long (every step unrolled): it is made, and hashed, only the first
    // time this op text, tile and binding count meet.
    let key = format!(
        "gemm|{}|{}|{}|{dtypes:?}|{ops}",
        tile.t,
        outs.len(),
        ins.len()
    );
    let build = || gemm_source(ops, dtypes, outs.len(), ins.len(), tile);
    let mut p = vec![m as u32, n as u32, k as u32, batch as u32];
    p.extend(extra);
    run.dispatch_keyed(
        name,
        &key,
        &build,
        outs,
        ins,
        p,
        [gx as u32, gy as u32, batch as u32],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_tiles_only_where_there_are_enough_of_them() {
        assert_eq!(Tile::for_shape(4096, 4096, 1), Tile::LARGE);
        assert_eq!(Tile::for_shape(1024, 1024, 1), Tile::SMALL);
        assert_eq!(Tile::for_shape(1024, 1024, 4), Tile::LARGE);
        assert_eq!(Tile::for_shape(64, 4096, 64), Tile::SMALL);
        for t in [Tile::SMALL, Tile::LARGE] {
            // 256 threads load one vec4 of each operand per step.
            assert_eq!(t.t * t.bk(), 1024);
        }
    }

    #[test]
    fn the_template_names_one_accumulator_per_vec4_of_the_block() {
        let ops = "fn setup(b: u32) {}\nfn loadA(m: u32, k: u32) -> f32 { return 0.0; }\n\
                   fn loadB(k: u32, n: u32) -> f32 { return 0.0; }\nfn storeC(m: u32, n: u32, v: f32) {}\n";
        for (tile, accs) in [(Tile::SMALL, 4u32), (Tile::LARGE, 16)] {
            let src = gemm_source(ops, &[DType::F32], 1, 2, tile);
            assert_eq!(src.matches("= vec4<f32>(0.0);").count() as u32, accs);
            // Each full step unrolled: BK copies of the block's FMAs, plus the tail's one.
            let fmas = src.matches("= fma(").count() as u32;
            assert_eq!(fmas, accs * (tile.bk() + 1));
        }
    }
}
