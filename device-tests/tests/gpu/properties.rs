//! The property suite on the device: for every row of the op table that a device backend claims,
//! cases drawn by the property suite's generators (`quorum_fuzz::opgen`: ranks 0-4, broadcasting,
//! empty dims, every attribute form, old and new opsets, f16/bf16/f64 retyping) run on each
//! accelerator present and are judged by both oracles. A new row is swept without an edit here.
//!
//! Only cases both oracles judge on the CPU run here (a form one oracle declines is the CPU property
//! suite's to report). Kernels may decline a case's form (the CPU then runs it, and the judgement
//! still holds); `QUORUM_DEVICE_PROPERTY_CASES` sets the cases per op (default [`CASES`]) and
//! `QUORUM_DEVICE_PROPERTY_OPS` (a comma list of op types) limits the sweep to those rows.
use quorum::Tensor;
use quorum_fuzz::opcase::{Checked, check, round_inputs, rt_attr, rt_dtype};
use quorum_fuzz::opgen::{self, CHOICES};
use quorum_optable::{Devices, ROWS};

use crate::harness::Case;

/// Cases per op by default: a sweep that a software adapter finishes in about a minute.
const CASES: u64 = 4;

/// A splitmix64 step: the choices and seeds of each op's cases, stable from run to run.
fn mix(z: u64) -> u64 {
    let z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn generated_cases_of_every_device_row() {
    let cases = std::env::var("QUORUM_DEVICE_PROPERTY_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(CASES);
    let only = std::env::var("QUORUM_DEVICE_PROPERTY_OPS").ok();
    let selected = |op: &str| {
        only.as_deref()
            .is_none_or(|list| list.split(',').any(|o| o.trim() == op))
    };
    let mut judged = 0;
    for row in ROWS
        .iter()
        .filter(|r| r.devices != Devices::NONE && selected(r.name))
    {
        let base = row.name.bytes().fold(0u64, |h, b| mix(h ^ b as u64));
        for k in 0..cases {
            let seed = mix(base ^ k);
            let choices: Vec<u32> = (0..CHOICES as u64)
                .map(|i| (mix(seed ^ (i << 32)) >> 16) as u32)
                .collect();
            let mut case = opgen::generate(row.name, &choices, seed);
            round_inputs(&mut case).unwrap();
            if !matches!(check(&case), Ok(Checked::Agree)) {
                continue;
            }
            let mut c = Case::new(row.name)
                .opset(case.opset)
                .outputs(case.num_outputs)
                .allow_fallback();
            for (name, a) in &case.attrs {
                c = c.attr(name, rt_attr(a));
            }
            for input in &case.inputs {
                c = match input {
                    Some(v) => {
                        let t = Tensor::from_f64s(rt_dtype(v.dtype), &v.shape, v.data.clone());
                        c.input(t.unwrap())
                    }
                    None => c.absent(),
                };
            }
            c.check();
            judged += 1;
        }
    }
    let least = if only.is_some() { 1 } else { 200 };
    assert!(judged >= least, "only {judged} generated cases were judged");
}
