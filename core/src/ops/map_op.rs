//! The elementwise ops a device runs through its map kernel, as typed descriptors: the op table's
//! Binary family (arithmetic, comparisons, logic, the variadic folds, BitShift) with Not, IsNaN and
//! IsInf, and the float unary ops ([`UnaryOp`]). Attributes are read and checked once, when the
//! node is read, with the CPU kernel's words for a bad one, so that a code generator matches
//! [`MapOp`] exhaustively and a new op is a compile error in every generator until each has its
//! kernel. Clip and Where, which take bounds and a condition, have kernels of their own.
use crate::error::{OpError, OpResult};
use crate::ops::OpCtx;
use crate::ops::unary_op::UnaryOp;

/// An elementwise op of a device's map kernel, with its attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MapOp {
    /// Logical negation of a bool.
    Not,
    /// And, Or, Xor of two bools.
    Logic(Logic),
    IsNaN,
    /// Which infinities count (`detect_positive`, `detect_negative`).
    IsInf {
        positive: bool,
        negative: bool,
    },
    /// A comparison of two operands, giving bools.
    Compare(Compare),
    /// Add, Sub, Mul, Div of two operands.
    Arith(Arith),
    /// `a^b`, the exponent of the base's type or another numeric one.
    Pow,
    /// The remainder: with the divisor's sign (integers, `fmod = 0`) or the dividend's (`fmod = 1`).
    Mod {
        fmod: bool,
    },
    /// `x < 0 ? slope · x : x`.
    PRelu,
    /// Sum, Mean, Max, Min of one or more operands.
    Fold(Fold),
    /// Bits shifted toward the high end (`left`) or the low end.
    BitShift {
        left: bool,
    },
    /// A float unary op.
    Unary(UnaryOp),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logic {
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

impl Arith {
    /// The ONNX op type.
    pub fn name(self) -> &'static str {
        match self {
            Arith::Add => "Add",
            Arith::Sub => "Sub",
            Arith::Mul => "Mul",
            Arith::Div => "Div",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    Sum,
    Mean,
    Max,
    Min,
}

impl MapOp {
    /// The descriptor of `ctx`'s node, or `None` for an op outside this family. An attribute of the
    /// wrong type, or a BitShift direction other than LEFT and RIGHT, is the CPU kernel's error.
    pub fn parse(ctx: &OpCtx) -> OpResult<Option<MapOp>> {
        let flag = |name: &str| -> OpResult<bool> { Ok(ctx.attr_i(name, 1)? != 0) };
        Ok(Some(match ctx.node.op_type.as_str() {
            "Not" => MapOp::Not,
            "And" => MapOp::Logic(Logic::And),
            "Or" => MapOp::Logic(Logic::Or),
            "Xor" => MapOp::Logic(Logic::Xor),
            "IsNaN" => MapOp::IsNaN,
            "IsInf" => MapOp::IsInf {
                positive: flag("detect_positive")?,
                negative: flag("detect_negative")?,
            },
            "Equal" => MapOp::Compare(Compare::Equal),
            "Less" => MapOp::Compare(Compare::Less),
            "LessOrEqual" => MapOp::Compare(Compare::LessOrEqual),
            "Greater" => MapOp::Compare(Compare::Greater),
            "GreaterOrEqual" => MapOp::Compare(Compare::GreaterOrEqual),
            "Add" => MapOp::Arith(Arith::Add),
            "Sub" => MapOp::Arith(Arith::Sub),
            "Mul" => MapOp::Arith(Arith::Mul),
            "Div" => MapOp::Arith(Arith::Div),
            "Pow" => MapOp::Pow,
            "Mod" => MapOp::Mod {
                fmod: ctx.attr_i("fmod", 0)? != 0,
            },
            "PRelu" => MapOp::PRelu,
            "Sum" => MapOp::Fold(Fold::Sum),
            "Mean" => MapOp::Fold(Fold::Mean),
            "Max" => MapOp::Fold(Fold::Max),
            "Min" => MapOp::Fold(Fold::Min),
            "BitShift" => MapOp::BitShift {
                left: match ctx.attr_s("direction", "")?.as_str() {
                    "LEFT" => true,
                    "RIGHT" => false,
                    d => {
                        return Err(OpError::Invalid(format!(
                            "BitShift direction must be LEFT or RIGHT, got '{d}'"
                        )));
                    }
                },
            },
            _ => match UnaryOp::parse(ctx)? {
                Some(u) => MapOp::Unary(u),
                None => return Ok(None),
            },
        }))
    }

    /// How many operands the op takes: exactly that many, or `None` for one or more (the folds).
    pub fn arity(self) -> Option<usize> {
        match self {
            MapOp::Not | MapOp::IsNaN | MapOp::IsInf { .. } | MapOp::Unary(_) => Some(1),
            MapOp::Logic(_)
            | MapOp::Compare(_)
            | MapOp::Arith(_)
            | MapOp::Pow
            | MapOp::Mod { .. }
            | MapOp::PRelu
            | MapOp::BitShift { .. } => Some(2),
            MapOp::Fold(_) => None,
        }
    }

    /// `Ok` when `n` operands are what `op` (the node's op type) takes; else the error that says
    /// how many it takes.
    pub fn check_arity(self, op: &str, n: usize) -> OpResult<()> {
        match self.arity() {
            Some(want) if want != n => Err(OpError::Invalid(format!(
                "{op} takes {} input{}",
                ["no", "one", "two"].get(want).copied().unwrap_or("more"),
                if want == 1 { "" } else { "s" }
            ))),
            _ => Ok(()),
        }
    }

    /// Whether the op reads and writes bools only (the logic ops).
    pub fn is_logic(self) -> bool {
        matches!(self, MapOp::Not | MapOp::Logic(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Node};
    use crate::ops::NoSubgraphs;

    fn parse(op: &str, attrs: Vec<(&str, Attr)>) -> OpResult<Option<MapOp>> {
        let node = Node {
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            opset: 22,
            inputs: vec![],
            outputs: vec![],
            attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        };
        let ctx = OpCtx {
            node: &node,
            runner: &NoSubgraphs,
            max_tensor_bytes: 1 << 30,
        };
        MapOp::parse(&ctx)
    }

    /// Every op the device map kernels take parses: the Binary family's rows but Where, and the
    /// unary rows but Clip (each has a kernel of its own); no other row does.
    #[test]
    fn every_map_row_parses() {
        use quorum_optable::{Family, rows_of};
        let own = ["Clip", "Where"];
        for row in rows_of(Family::Unary).chain(rows_of(Family::Binary)) {
            let parsed = parse(row.name, vec![("direction", Attr::String("LEFT".into()))]).unwrap();
            assert_eq!(parsed.is_some(), !own.contains(&row.name), "{}", row.name);
        }
        for row in rows_of(Family::Movement).chain(rows_of(Family::Reduction)) {
            assert_eq!(parse(row.name, vec![]).unwrap(), None, "{}", row.name);
        }
    }

    #[test]
    fn attributes_are_read_with_their_defaults() {
        assert_eq!(
            parse("IsInf", vec![("detect_negative", Attr::Int(0))]).unwrap(),
            Some(MapOp::IsInf {
                positive: true,
                negative: false
            })
        );
        assert_eq!(
            parse("Mod", vec![]).unwrap(),
            Some(MapOp::Mod { fmod: false })
        );
        assert_eq!(
            parse(
                "BitShift",
                vec![("direction", Attr::String("RIGHT".into()))]
            )
            .unwrap(),
            Some(MapOp::BitShift { left: false })
        );
        assert!(matches!(
            parse("Selu", vec![]).unwrap(),
            Some(MapOp::Unary(UnaryOp::Selu { .. }))
        ));
        assert_eq!(parse("Where", vec![]).unwrap(), None);
    }

    /// A bad direction is the CPU kernel's error, word for word; a missing one too.
    #[test]
    fn a_bitshift_without_a_direction_is_refused() {
        for attrs in [vec![], vec![("direction", Attr::String("UP".into()))]] {
            let e = parse("BitShift", attrs).unwrap_err().to_string();
            assert!(
                e.contains("BitShift direction must be LEFT or RIGHT"),
                "{e}"
            );
        }
    }

    #[test]
    fn arity_errors_name_the_count() {
        let add = MapOp::Arith(Arith::Add);
        assert!(add.check_arity("Add", 2).is_ok());
        let e = add.check_arity("Add", 3).unwrap_err().to_string();
        assert!(e.contains("Add takes two inputs"), "{e}");
        let e = MapOp::IsNaN
            .check_arity("IsNaN", 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("IsNaN takes one input"), "{e}");
        assert!(MapOp::Fold(Fold::Sum).check_arity("Sum", 5).is_ok());
    }
}
