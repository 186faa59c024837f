//! Unit tests of the tiled GEMM generator (structure of the generated PTX).
use super::*;
use crate::ptx::module;

pub(crate) fn all_cfgs() -> Vec<TileCfg> {
    let mut v = Vec::new();
    for variant in [
        Variant::Big,
        Variant::Small,
        Variant::Naive,
        Variant::Skinny(1),
        Variant::Skinny(4),
        Variant::Tf32Big,
        Variant::Tf32Small,
        Variant::TcAsync,
    ] {
        for (trans_a, vec_a) in [(false, false), (false, true), (true, true)] {
            for b in [
                BSrc::Strided {
                    trans: false,
                    vec: true,
                },
                BSrc::Strided {
                    trans: true,
                    vec: false,
                },
                BSrc::Strided {
                    trans: true,
                    vec: true,
                },
                BSrc::Im2col,
            ] {
                if matches!(variant, Variant::Skinny(_)) && b == BSrc::Im2col {
                    continue;
                }
                for (has_c, elem, split) in [
                    (false, Elem::F32, false),
                    (true, Elem::F32, false),
                    (true, Elem::F16, false),
                    (true, Elem::Bf16, false),
                    (false, Elem::F32, true),
                ] {
                    let cfg = TileCfg {
                        variant,
                        trans_a,
                        vec_a,
                        b,
                        has_c,
                        elem,
                        split,
                    };
                    if variant == Variant::TcAsync && !super::super::tc_async::fits(&cfg) {
                        continue;
                    }
                    v.push(cfg);
                }
            }
        }
    }
    v
}

#[test]
fn every_variant_generates_declared_ptx() {
    for cfg in all_cfgs() {
        let kern = build(&cfg);
        let text = module((9, 0), &[kern]);
        let name = cfg.name();
        assert!(text.contains(&format!(".visible .entry {name}(")), "{name}");
        assert!(!text.contains(".approx"), "{name}");
        assert!(text.contains(".param .u64 a"), "{name}");
        let n_params = text.matches("\t.param .").count();
        let want = if cfg.b == BSrc::Im2col { 49 } else { 31 };
        assert_eq!(n_params, want, "{name}");
        let args = GemmArgs {
            im2col: (cfg.b == BSrc::Im2col).then(Im2col::default),
            ..Default::default()
        };
        assert_eq!(args.args().len(), want, "{name}");
        // Every register used is declared: the highest index per class is below the count.
        if matches!(cfg.variant, Variant::Skinny(_)) {
            assert!(text.contains("L_loop_"), "{name}");
        } else if cfg.variant != Variant::Naive {
            assert!(text.contains("bar.sync 0"), "{name}");
            if cfg.variant == Variant::TcAsync && cfg.elem.is_half() {
                // As below, with k-tiles of 32 halves: per k-step of 16, one `ldmatrix.x4` per
                // 16 rows of A and per two n8 tiles of B, 16 m16n8k16 products per warp; no
                // rounding.
                let copies = text.matches("cp.async.cg.shared.global").count();
                assert_eq!(copies, 4 * super::super::tc_async::STAGES, "{name}");
                assert_eq!(text.matches("cvt.rna.tf32.f32").count(), 0, "{name}");
                assert_eq!(
                    text.matches("ldmatrix.sync.aligned.m8n8.x4").count(),
                    12,
                    "{name}"
                );
                let trans = text.matches("ldmatrix.sync.aligned.m8n8.x4.trans").count();
                let b_along_n = matches!(cfg.b, BSrc::Strided { trans: false, .. });
                assert_eq!(
                    trans,
                    8 * cfg.trans_a as usize + 4 * b_along_n as usize,
                    "{name}"
                );
                let t = if cfg.elem == Elem::Bf16 {
                    "bf16"
                } else {
                    "f16"
                };
                let mma = format!("mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32");
                assert_eq!(text.matches(&mma).count(), 32, "{name}");
                assert!(text.contains("cp.async.wait_group 2"), "{name}");
            } else if cfg.variant == Variant::TcAsync {
                // Per thread: one 16-byte copy of A and one of B per k-tile, three tiles issued
                // ahead of the loop and one in it; every fragment value rounded as it is loaded
                // (16 of A, 8 of B); 16 products per warp and k-tile.
                let copies = text.matches("cp.async.cg.shared.global").count();
                assert_eq!(copies, 2 * super::super::tc_async::STAGES, "{name}");
                assert_eq!(text.matches("cvt.rna.tf32.f32").count(), 24, "{name}");
                let mmas = text
                    .matches("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
                    .count();
                assert_eq!(mmas, 16, "{name}");
                assert!(text.contains("cp.async.wait_group 2"), "{name}");
            } else if cfg.tensor_cores() {
                // f32 operands rounded as they enter shared memory (4 of A and 4 of B per thread
                // and loader pass, two passes, in the prologue and the loop; f16 operands are
                // TF32 values already); per k-tile a warp's 64×32 outputs over two k steps of 8
                // (or 32×16 over four) in m16n8k8 products.
                let rounded = if cfg.elem.is_half() { 0 } else { 32 };
                assert_eq!(text.matches("cvt.rna.tf32.f32").count(), rounded, "{name}");
                let mmas = text
                    .matches("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
                    .count();
                let want = if cfg.variant == Variant::Tf32Big {
                    32
                } else {
                    16
                };
                assert_eq!(mmas, want, "{name}");
            } else {
                assert!(text.contains("ld.shared.v4.f32"), "{name}");
            }
        } else {
            assert!(text.contains("L_loop_"), "{name}");
        }
        match cfg.elem {
            Elem::F16 => assert!(text.contains("cvt.f32.f16") && text.contains("cvt.rn.f16.f32")),
            Elem::Bf16 => assert!(text.contains("shl.b32") && text.contains("cvt.rn.bf16.f32")),
            Elem::F32 => assert!(!text.contains(".f16") && !text.contains("bf16"), "{name}"),
        }
        if cfg.vec_a && matches!(cfg.variant, Variant::Big | Variant::Small) {
            let vector = if cfg.elem.is_half() {
                "ld.global.nc.v4.b16"
            } else {
                "ld.global.nc.v4.f32"
            };
            assert!(text.contains(vector), "{name}");
        }
    }
}

#[test]
fn big_tile_has_64_accumulating_fmas_per_k_step() {
    let cfg = TileCfg {
        variant: Variant::Big,
        trans_a: false,
        vec_a: true,
        b: BSrc::Strided {
            trans: false,
            vec: true,
        },
        has_c: true,
        elem: Elem::F32,
        split: false,
    };
    let text = module((9, 0), &[build(&cfg)]);
    // 8 k-steps of 8×8 accumulations, plus the epilogue's beta·C fmas.
    let accs = text
        .lines()
        .filter(|l| l.trim_start().starts_with("fma.rn.f32"))
        .count();
    assert_eq!(accs, 8 * 64 + 64, "{accs}");
    assert_eq!(text.matches("ld.shared.v4.f32").count(), 8 * 4);
    // 16896 bytes of shared memory: two stages of (8 × 132) floats for each operand.
    assert!(text.contains("smem[16896]"), "{text}");
}

#[test]
fn parameters_are_declared_in_argument_order() {
    let mut want: Vec<String> = [
        "a", "b", "c", "y", "m", "n", "k", "lda", "ldb", "ldy", "c_rs",
    ]
    .iter()
    .chain(&["c_cs", "alpha", "beta", "nsplit", "kc", "ssy", "d1", "d2"])
    .map(|s| s.to_string())
    .collect();
    for op in ["sa", "sb", "sc", "sy"] {
        want.extend((0..3).map(|j| format!("{op}{j}")));
    }
    let geom = [
        "i0", "i1", "i2", "o12", "o2", "k12", "k2", "ksz", "in_sp", "s0", "s1", "s2", "dl0", "dl1",
        "dl2", "pd0", "pd1", "pd2",
    ];
    for cfg in all_cfgs() {
        let text = module((9, 0), &[build(&cfg)]);
        let got: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix(".param ."))
            .map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap()
                    .trim_end_matches(',')
                    .to_string()
            })
            .collect();
        let mut w = want.clone();
        if cfg.b == BSrc::Im2col {
            w.extend(geom.iter().map(|s| s.to_string()));
        }
        assert_eq!(got, w, "{}", cfg.name());
    }
}

/// Host cost of generating a GEMM module's text and hashing it (what a launch pays to find its
/// compiled module). Timing only: `cargo test --release -p quorum --lib -- --ignored --nocapture
/// ptx_generation_cost`.
#[test]
#[ignore = "timing: run by hand"]
fn ptx_generation_cost() {
    use std::hash::{BuildHasher, RandomState};
    for cfg in all_cfgs().into_iter().step_by(17) {
        let t = std::time::Instant::now();
        let reps = 200;
        let mut bytes = 0;
        let mut h = 0u64;
        let s = RandomState::new();
        for _ in 0..reps {
            let text = module((9, 0), &[build(&cfg)]);
            bytes = text.len();
            h ^= s.hash_one(&text);
        }
        let per = t.elapsed().as_secs_f64() / reps as f64 * 1e6;
        println!(
            "{:40} {bytes:7} bytes {per:8.1} us per generate+hash ({h:x})",
            cfg.name()
        );
    }
}

/// Host cost of a small kernel's text (the pool family's 3×3 MaxPool) and of SipHash over a 44 KB
/// GEMM text. Timing only, like `ptx_generation_cost`.
#[test]
#[ignore = "timing: run by hand"]
fn small_kernel_and_hash_cost() {
    use crate::ops::pool::{Dim, PoolKind, pool_kernel};
    use crate::ops::reduce::rows::Elem;
    use std::hash::{BuildHasher, RandomState};
    let dim = |ins, stride, mul| Dim {
        ins,
        outs: ins / 2,
        k: 3,
        s: 2,
        d: 1,
        pb: 1,
        pe: 1,
        stride,
        mul,
    };
    let dims = [dim(112, 112, 56), dim(112, 1, 1)];
    let kind = PoolKind::Max {
        indices: false,
        col_major: false,
    };
    let t = std::time::Instant::now();
    let mut n = 0;
    for _ in 0..2000 {
        n += module((9, 0), &[pool_kernel(kind, Elem::F32, &dims)]).len();
    }
    let per = t.elapsed().as_secs_f64() / 2000.0 * 1e6;
    println!("pool kernel: {per:.1} us per generate ({} bytes)", n / 2000);
    let text = module((9, 0), &[build(&all_cfgs()[0])]);
    let s = RandomState::new();
    let t = std::time::Instant::now();
    let mut h = 0u64;
    for _ in 0..2000 {
        h ^= s.hash_one(&text);
    }
    let per = t.elapsed().as_secs_f64() / 2000.0 * 1e6;
    println!("SipHash of {} bytes: {per:.2} us ({h:x})", text.len());
}

#[test]
#[ignore = "prints a tensor-core kernel for reading"]
fn print_tf32() {
    let cfg = TileCfg {
        variant: Variant::TcAsync,
        trans_a: false,
        vec_a: true,
        b: BSrc::Strided {
            trans: false,
            vec: true,
        },
        has_c: false,
        elem: Elem::F32,
        split: false,
    };
    println!("{}", module((9, 0), &[build(&cfg)]));
}
