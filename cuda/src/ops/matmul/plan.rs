//! How a tiled GEMM is launched: which block tile (128×128 or 64×64) and how many splits along K.
//!
//! The choice is a small cost model of the GPU rather than a rule of thumb, because the right answer
//! turns on wave quantisation: a 1024×768 output is 48 tiles of 128×128 on 132 SMs (a third of the
//! GPU) or 192 tiles of 64×64 (one and a half "waves" of one tile per SM), and splitting K
//! multiplies either count. The model gives every candidate (tile, splits) a time:
//!
//! - blocks are dealt round-robin, so the busiest SM runs `j = ⌈blocks / SMs⌉` of them;
//! - an SM running `j` blocks (at most `slots` at once) computes at a per-SM rate measured for that
//!   tile and that many co-resident blocks (one block alone hides less latency than two);
//! - each round of resident blocks pays a fixed cost (prologue, the first loads, the epilogue);
//! - a split adds the reduction launch: every partial read once, the output written once.
//!
//! The rates come from timing every candidate at transformer and CNN shapes on the H200
//! (`bench_gemm_plans` in the device benchmarks prints measured and modelled times side by side;
//! `reports/cuda/gemm-plans.md` has the table they were fitted to). The model is deterministic: one
//! shape always gets one plan, so results do not change between processes or runs. Any plan is
//! correct; the model only decides speed (`sgemm_plan` forces one, for the benchmark and the tests
//! that run every candidate against the oracles).
use super::tile::Variant;

/// A launch plan for the tiled kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `Big` (128×128×8) or `Small` (64×64×16).
    pub variant: Variant,
    /// Number of K chunks (1: no split, the kernel writes Y itself).
    pub nsplit: usize,
    /// Length of every chunk but the last (a multiple of the tile's K step).
    pub kc: usize,
}

impl Plan {
    /// `variant` with K cut into (about) `want` chunks, each a multiple of the tile's K step; the
    /// split count is what those chunks give (a plan never has an empty chunk).
    pub fn new(variant: Variant, k: usize, want: usize) -> Plan {
        let step = step(variant);
        let want = want.max(1);
        if want == 1 || k <= step {
            return Plan {
                variant,
                nsplit: 1,
                kc: k,
            };
        }
        let kc = k.div_ceil(want).next_multiple_of(step);
        Plan {
            variant,
            nsplit: k.div_ceil(kc),
            kc,
        }
    }
}

/// The GEMM's size as the model sees it.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Number of products in the launch (batch dims multiplied).
    pub nb: usize,
    /// Bytes per output element (2 for f16, 4 for f32).
    pub es: usize,
    /// Whether the launch may split K (the batch fits the grid with the splits; at most three batch
    /// dims).
    pub splittable: bool,
    /// The 128×128 tile runs as the asynchronous tensor-core kernel (`TcAsync`: f32 as TF32 where
    /// the session allows it, f16 always; rows 16-byte aligned). Its rates are then the tensor
    /// cores', several times the 64×64 register-staged tile's, and it is the only tile weighed.
    pub tc_async: bool,
}

/// K step of a tile variant (a chunk is a multiple of it).
fn step(v: Variant) -> usize {
    match v {
        Variant::Big | Variant::Tf32Big | Variant::TcAsync => 8,
        _ => 16,
    }
}

/// Calibration of one tile variant on one GPU.
struct TileModel {
    bm: usize,
    bn: usize,
    /// Most blocks resident on one SM (registers and shared memory).
    slots: usize,
    /// Per-SM rate with 1, 2, … `slots` resident blocks, in FLOP per µs.
    rate: &'static [f64],
    /// Fixed cost of each round of resident blocks, µs.
    round_us: f64,
}

// Fitted on the H200 (132 SMs) to 716 plans of 24 shapes (`benches/gpu/fit_gemm_plans.py`,
// `reports/cuda/gemm-plans.md`): rms error 1.08×; the fitted choices are within 1.024× of the fastest
// plan measured (geometric mean), 1.12× at worst.
const BIG: TileModel = TileModel {
    bm: 128,
    bn: 128,
    slots: 2,
    rate: &[2.63e5, 3.39e5],
    round_us: 5.9,
};

const SMALL: TileModel = TileModel {
    bm: 64,
    bn: 64,
    slots: 8,
    rate: &[
        1.75e5, 2.33e5, 2.33e5, 2.31e5, 2.21e5, 2.31e5, 2.32e5, 2.55e5,
    ],
    round_us: 2.6,
};

// The asynchronous tensor-core tile, fitted by hand on the H100 (132 SMs) to the forced plans of
// `bench_f16_gemm` and `bench_kernels` (square 1024–4096, bert-base's 1024×768|3072 projections,
// split 1, 2 and 4; `reports/cuda/tf32.md`): within 1.25× of every measured time. One block alone
// on an SM hides less of the copies' latency than two.
const TC_ASYNC_F16: TileModel = TileModel {
    bm: 128,
    bn: 128,
    slots: 2,
    rate: &[2.0e6, 2.35e6],
    round_us: 8.0,
};

const TC_ASYNC_TF32: TileModel = TileModel {
    bm: 128,
    bn: 128,
    slots: 2,
    rate: &[0.64e6, 0.96e6],
    round_us: 8.0,
};

/// Launch latency of one kernel as it shows in a stream of launches, µs.
const LAUNCH_US: f64 = 4.4;
/// Bandwidth the split reduction reaches, bytes per µs.
const REDUCE_BYTES_PER_US: f64 = 1.6e6;
/// Most splits considered.
const MAX_SPLITS: usize = 32;
/// Shortest K chunk considered.
const MIN_CHUNK: usize = 32;

fn model(v: Variant, d: &Dims) -> &'static TileModel {
    match v {
        Variant::Big if d.tc_async && d.es == 2 => &TC_ASYNC_F16,
        Variant::Big if d.tc_async => &TC_ASYNC_TF32,
        Variant::Big => &BIG,
        _ => &SMALL,
    }
}

/// Modelled time of `plan` for `d` on `sms` SMs, in µs.
pub fn cost(plan: &Plan, d: &Dims, sms: usize) -> f64 {
    let t = model(plan.variant, d);
    let tiles = d.m.div_ceil(t.bm) * d.n.div_ceil(t.bn) * d.nb;
    let blocks = tiles * plan.nsplit;
    let per_sm = blocks.div_ceil(sms.max(1));
    let resident = per_sm.min(t.slots);
    let rounds = per_sm.div_ceil(t.slots);
    let flops = 2.0 * (t.bm * t.bn * plan.kc) as f64;
    let mut us =
        LAUNCH_US + per_sm as f64 * flops / t.rate[resident - 1] + rounds as f64 * t.round_us;
    if plan.nsplit > 1 {
        let outs = (d.nb * d.m * d.n) as f64;
        let bytes = outs * (4.0 * plan.nsplit as f64 + d.es as f64);
        us += LAUNCH_US + bytes / REDUCE_BYTES_PER_US;
    }
    us
}

/// Every plan the model weighs for `d` (both tiles, or the big one alone where it runs on the
/// asynchronous tensor-core kernel; every distinct split count), no split first.
pub fn candidates(d: &Dims) -> Vec<Plan> {
    let mut out = Vec::new();
    let tiles: &[Variant] = if d.tc_async {
        &[Variant::Big]
    } else {
        &[Variant::Big, Variant::Small]
    };
    for &v in tiles {
        out.push(Plan::new(v, d.k, 1));
        if !d.splittable {
            continue;
        }
        for want in 2..=MAX_SPLITS.min(d.k / MIN_CHUNK) {
            let p = Plan::new(v, d.k, want);
            if p.nsplit > 1
                && d.nb * p.nsplit <= 65535
                && !out
                    .iter()
                    .any(|q: &Plan| q.variant == v && q.nsplit == p.nsplit)
            {
                out.push(p);
            }
        }
    }
    out
}

/// The cheapest plan for `d` on `sms` SMs (ties go to the earlier candidate: fewer splits, the
/// big tile).
pub fn choose(d: &Dims, sms: usize) -> Plan {
    let mut best: Option<(f64, Plan)> = None;
    for p in candidates(d) {
        let c = cost(&p, d, sms);
        if best.is_none_or(|(bc, _)| c < bc) {
            best = Some((c, p));
        }
    }
    best.map(|(_, p)| p)
        .unwrap_or_else(|| Plan::new(Variant::Small, d.k, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(m: usize, n: usize, k: usize, nb: usize) -> Dims {
        Dims {
            m,
            n,
            k,
            nb,
            es: 4,
            splittable: true,
            tc_async: false,
        }
    }

    #[test]
    fn chunks_cover_k_exactly_once() {
        for k in [1usize, 7, 8, 9, 31, 64, 100, 768, 3072, 4097] {
            for want in 1..40 {
                for v in [Variant::Big, Variant::Small] {
                    let p = Plan::new(v, k, want);
                    assert!(p.nsplit >= 1 && p.kc >= 1, "{p:?}");
                    // Every chunk but the last is full; the last is not empty.
                    assert!((p.nsplit - 1) * p.kc < k.max(1), "{k} {want} {p:?}");
                    assert!(p.nsplit * p.kc >= k, "{k} {want} {p:?}");
                    if p.nsplit > 1 {
                        assert_eq!(p.kc % step(v), 0);
                    }
                }
            }
        }
    }

    #[test]
    fn unsplittable_launches_get_no_split() {
        let d = Dims {
            splittable: false,
            ..dims(128, 768, 768, 1)
        };
        for p in candidates(&d) {
            assert_eq!(p.nsplit, 1);
        }
        assert_eq!(choose(&d, 132).nsplit, 1);
        // A batch so large that the splits would overflow the grid's z.
        let d = dims(64, 64, 4096, 40000);
        assert!(candidates(&d).iter().all(|p| d.nb * p.nsplit <= 65535));
    }

    #[test]
    fn large_squares_take_the_big_tile_unsplit() {
        // 4096²: 1,024 big tiles fill the GPU many times over.
        let p = choose(&dims(4096, 4096, 4096, 1), 132);
        assert_eq!((p.variant, p.nsplit), (Variant::Big, 1));
    }

    #[test]
    fn a_third_of_the_gpu_is_worth_a_split() {
        // BERT-base at batch 8: 1024×768 outputs with K = 768 and 3072. 48 big tiles leave most
        // SMs idle: the model splits K rather than run 48 blocks.
        for k in [768, 3072] {
            let d = dims(1024, 768, k, 1);
            let p = choose(&d, 132);
            assert!(p.nsplit > 1, "{k}: {p:?}");
            assert!(cost(&p, &d, 132) < cost(&Plan::new(Variant::Small, k, 1), &d, 132));
        }
    }

    #[test]
    fn the_cost_grows_with_the_work() {
        // More SMs never cost more; twice the K never costs less.
        let d = dims(512, 512, 1024, 2);
        for p in candidates(&d) {
            assert!(cost(&p, &d, 132) <= cost(&p, &d, 66), "{p:?}");
        }
        let p = Plan::new(Variant::Big, 1024, 1);
        let q = Plan::new(Variant::Big, 2048, 1);
        assert!(cost(&q, &dims(512, 512, 2048, 2), 132) > cost(&p, &d, 132));
    }

    #[test]
    fn the_asynchronous_tensor_core_tile_is_weighed_alone_at_its_rates() {
        // bert-base's projections at batch 8 in f16: the async 128×128 tile beat the 64×64
        // register-staged one at every split on the H100 (43.6 against 27.5 TFLOP/s at best for
        // 1024×768×768), so it is the only candidate; a long K still splits.
        for (k, es) in [(768, 2), (3072, 2), (768, 4)] {
            let d = Dims {
                es,
                tc_async: true,
                ..dims(1024, 768, k, 1)
            };
            assert!(candidates(&d).iter().all(|p| p.variant == Variant::Big));
            let p = choose(&d, 132);
            if k == 3072 && es == 2 {
                assert!(p.nsplit > 1, "{p:?}");
            }
        }
        // The tensor cores' rates make the same plan cheaper than on the CUDA cores.
        let cuda = dims(4096, 4096, 4096, 1);
        let tc = Dims {
            es: 2,
            tc_async: true,
            ..cuda
        };
        let p = Plan::new(Variant::Big, 4096, 1);
        assert!(cost(&p, &tc, 132) * 4.0 < cost(&p, &cuda, 132));
    }
}
