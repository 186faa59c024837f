//! What a kernel declares about the arithmetic of its long sums ([`Arithmetic`]): how it rounds
//! its products' operands and how it rounds its sums. The bound and the spread judge take it.
/// The arithmetic of a kernel's long sums, as it declares it: how it rounds the operands of each
/// product, and how it rounds its sums. Rounded operands widen the bound of a long sum by each
/// product's two roundings (`2·u·m`, `u` the declared format's unit roundoff); the spread judge's
/// model kernel rounds its operands and its sums as declared. A kernel that rounds without
/// declaring it is wrong; one that declares it is judged by its declaration.
///
/// Sums: the standard promise is f32 additions rounded to nearest. The tensor cores add a few
/// exact products at a time to an f32 accumulator and truncate the result (round toward zero):
/// per element that stays within the long sum's bound (`K / block` roundings of at most one ulp,
/// against the bound's `K` half-ulps), but where the terms share a sign the errors all lean the
/// same way, and measured against a model that rounds to nearest they are many times its spread
/// (32× on the H100 at K = 4,096, positive terms). A tensor-core kernel declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arithmetic {
    /// The explicit mantissa bits each product's operands are rounded to (to nearest, ties away
    /// from zero, as `cvt.rna.tf32.f32` does), or `None`: the element type's values, as they are.
    pub operand_bits: Option<u32>,
    pub sums: Sums,
}

/// How a kernel rounds the running sums of a long sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sums {
    /// Every addition rounded to nearest in the compute type (the standard promise).
    Nearest,
    /// `block` products at a time added exactly to the f32 accumulator, the result truncated
    /// toward zero: the tensor cores' `mma` with f32 accumulators.
    Truncated { block: usize },
}

impl Default for Arithmetic {
    fn default() -> Arithmetic {
        Arithmetic::EXACT
    }
}

impl Arithmetic {
    /// The standard promise: operands as they are, sums rounded to nearest.
    pub const EXACT: Arithmetic = Arithmetic {
        operand_bits: None,
        sums: Sums::Nearest,
    };

    /// The tensor cores' sums (blocks of four products, truncated), operands as they are: f16
    /// operands on the TF32 or f16 `mma`.
    pub const TENSOR_CORES: Arithmetic = Arithmetic {
        operand_bits: None,
        sums: Sums::Truncated { block: 4 },
    };

    /// f32 operands rounded to TF32's 10 explicit mantissa bits, on the tensor cores.
    pub const TF32: Arithmetic = Arithmetic {
        operand_bits: Some(10),
        sums: Sums::Truncated { block: 4 },
    };

    /// Operands rounded to `mantissa` explicit bits, sums rounded to nearest.
    pub fn rounded(mantissa: u32) -> Arithmetic {
        Arithmetic {
            operand_bits: Some(mantissa),
            sums: Sums::Nearest,
        }
    }

    /// What a node declares whose launches declared `self` and `other`: the coarser operands
    /// and the looser sums of the two.
    pub fn join(self, other: Arithmetic) -> Arithmetic {
        let operand_bits = match (self.operand_bits, other.operand_bits) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sums = match (self.sums, other.sums) {
            (Sums::Truncated { block: a }, Sums::Truncated { block: b }) => {
                Sums::Truncated { block: a.min(b) }
            }
            (Sums::Truncated { block }, _) | (_, Sums::Truncated { block }) => {
                Sums::Truncated { block }
            }
            _ => Sums::Nearest,
        };
        Arithmetic { operand_bits, sums }
    }

    /// The unit roundoff of the declared operand format (0 for exact operands).
    pub fn unit(self) -> f64 {
        match self.operand_bits {
            None => 0.0,
            Some(mantissa) => 0.5f64.powi(mantissa as i32 + 1),
        }
    }

    /// `x` as the kernel declares it takes it (an f32 operand).
    pub fn round(self, x: f32) -> f32 {
        match self.operand_bits {
            Some(mantissa) if mantissa < 23 && x.is_finite() => {
                let drop = 23 - mantissa;
                let half = 1u32 << (drop - 1);
                f32::from_bits((x.to_bits().wrapping_add(half)) & !((1u32 << drop) - 1))
            }
            _ => x,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node whose launches declared different arithmetic is judged by the loosest of them:
    /// the coarser operands, the truncated sums (with the shorter block); the standard promise
    /// joins as the identity.
    #[test]
    fn declarations_join_to_the_loosest() {
        let e = Arithmetic::EXACT;
        assert_eq!(e.join(e), e);
        assert_eq!(e.join(Arithmetic::TF32), Arithmetic::TF32);
        assert_eq!(Arithmetic::TENSOR_CORES.join(e), Arithmetic::TENSOR_CORES);
        assert_eq!(
            Arithmetic::TENSOR_CORES.join(Arithmetic::rounded(7)),
            Arithmetic {
                operand_bits: Some(7),
                sums: Sums::Truncated { block: 4 },
            }
        );
        let b8 = Arithmetic {
            operand_bits: None,
            sums: Sums::Truncated { block: 8 },
        };
        assert_eq!(b8.join(Arithmetic::TENSOR_CORES), Arithmetic::TENSOR_CORES);
        assert_eq!(
            Arithmetic::rounded(10).join(Arithmetic::rounded(7)).unit(),
            0.5f64.powi(8)
        );
        assert_eq!(Arithmetic::default(), e);
    }
}
