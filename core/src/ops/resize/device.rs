//! Resize's tables as device kernels read them: one small array of u32 words, the same for every
//! accelerator (the CUDA and wgpu kernels walk it alike).
//!
//! Layout: words 0..2 hold the extrapolation value's bits in the data's device layout; then, per
//! resized axis, `out · n` source element offsets (`idx · input stride`; [`SENTINEL`] for an output
//! position that takes the extrapolation value) and, when interpolating, `out · n` f32 weights.
use super::{AxisTable, Taps};

/// The offset of an extrapolated output position (element offsets stay below 2^31, so a signed
/// test `< 0` finds it).
pub const SENTINEL: u32 = u32::MAX;

/// How one output dim reads the input.
#[derive(Clone, Debug, PartialEq)]
pub enum DimMap {
    /// Output coordinate c reads input coordinate c: element offset `c · stride`.
    Identity { stride: u32 },
    /// `n` taps per output position: offsets at table word `offs + c·n + k`, weights (when
    /// interpolating) at `weights + c·n + k`.
    Taps {
        n: usize,
        offs: usize,
        weights: usize,
    },
}

/// The tables of a resize of `in_shape`, with what its kernel needs to know.
pub struct DeviceTables {
    pub dims: Vec<DimMap>,
    pub words: Vec<u32>,
    /// Weighted taps (linear, cubic) rather than nearest maps.
    pub interp: bool,
    /// Some output position takes the extrapolation value.
    pub extrap: bool,
}

/// The words of `tables` for an input of `in_shape`, led by `fill_bits`; `Err` (a reason to run
/// the node on the CPU) where an offset or the table outgrows 31 bits.
pub fn device_tables(
    in_shape: &[usize],
    tables: &[AxisTable],
    fill_bits: u64,
) -> Result<DeviceTables, String> {
    let mut st = vec![1usize; in_shape.len()];
    for i in (0..in_shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * in_shape[i + 1];
    }
    let interp = tables.iter().any(|t| matches!(t, AxisTable::Taps(_)));
    let mut words = vec![fill_bits as u32, (fill_bits >> 32) as u32];
    let mut dims = Vec::with_capacity(tables.len());
    let mut extrap = false;
    let u32_of = |v: usize| -> Result<u32, String> {
        u32::try_from(v)
            .ok()
            .filter(|&v| v < (1u32 << 31))
            .ok_or_else(|| format!("offset {v} exceeds 32-bit indexing"))
    };
    for (d, t) in tables.iter().enumerate() {
        match t {
            AxisTable::Identity => dims.push(DimMap::Identity {
                stride: u32_of(st[d])?,
            }),
            AxisTable::Map(m) => {
                let offs = words.len();
                for o in m {
                    match o {
                        Some(i) => words.push(u32_of(i * st[d])?),
                        None => {
                            extrap = true;
                            words.push(SENTINEL);
                        }
                    }
                }
                dims.push(DimMap::Taps {
                    n: 1,
                    offs,
                    weights: 0,
                });
            }
            AxisTable::Taps(Taps {
                n,
                idx,
                w,
                extrap: ex,
            }) => {
                let offs = words.len();
                for (o, &ex) in ex.iter().enumerate() {
                    for k in 0..*n {
                        if ex {
                            extrap = true;
                            words.push(SENTINEL);
                        } else {
                            words.push(u32_of(idx[o * n + k] * st[d])?);
                        }
                    }
                }
                let weights = words.len();
                words.extend(w.iter().map(|&w| (w as f32).to_bits()));
                dims.push(DimMap::Taps {
                    n: *n,
                    offs,
                    weights,
                });
            }
        }
    }
    if words.len() >= 1 << 31 {
        return Err(format!("resize tables of {} words", words.len()));
    }
    Ok(DeviceTables {
        dims,
        words,
        interp,
        extrap,
    })
}
