//! The float unary ops as typed descriptors: each op with its attributes, defaults applied and
//! checked once when the node is read, so that a code generator matches [`UnaryOp`] exhaustively
//! and a new op is a compile error in every generator until each has its expression.
use crate::error::{OpError, OpResult};
use crate::ops::OpCtx;

/// A float unary op of the op table's unary family that maps each value alone (Clip, Not, IsNaN and
/// IsInf, which take bounds, bools or give bools, are not here), with its attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    Abs,
    Neg,
    Ceil,
    Floor,
    Round,
    Sign,
    Reciprocal,
    Sqrt,
    Exp,
    Log,
    Erf,
    Sin,
    Cos,
    Tan,
    Tanh,
    Sigmoid,
    Relu,
    LeakyRelu {
        alpha: f32,
    },
    Elu {
        alpha: f32,
    },
    Selu {
        alpha: f32,
        gamma: f32,
    },
    Celu {
        alpha: f32,
    },
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    HardSwish,
    Softplus,
    Softsign,
    /// `tanh`: the `approximate="tanh"` form.
    Gelu {
        tanh: bool,
    },
    Mish,
    ThresholdedRelu {
        alpha: f32,
    },
}

/// Selu's defaults: the spec's constants as f32 (the type the attributes have).
pub const SELU_ALPHA: f32 = 1.673_263_2;
pub const SELU_GAMMA: f32 = 1.050_701;

impl UnaryOp {
    /// The descriptor of `ctx`'s node, or `None` for an op that is not a float unary op of this
    /// kind. An attribute of the wrong type or an unknown Gelu mode is the CPU kernel's error.
    pub fn parse(ctx: &OpCtx) -> OpResult<Option<UnaryOp>> {
        let f = |name: &str, default: f32| ctx.attr_f(name, default);
        Ok(Some(match ctx.node.op_type.as_str() {
            "Abs" => UnaryOp::Abs,
            "Neg" => UnaryOp::Neg,
            "Ceil" => UnaryOp::Ceil,
            "Floor" => UnaryOp::Floor,
            "Round" => UnaryOp::Round,
            "Sign" => UnaryOp::Sign,
            "Reciprocal" => UnaryOp::Reciprocal,
            "Sqrt" => UnaryOp::Sqrt,
            "Exp" => UnaryOp::Exp,
            "Log" => UnaryOp::Log,
            "Erf" => UnaryOp::Erf,
            "Sin" => UnaryOp::Sin,
            "Cos" => UnaryOp::Cos,
            "Tan" => UnaryOp::Tan,
            "Tanh" => UnaryOp::Tanh,
            "Sigmoid" => UnaryOp::Sigmoid,
            "Relu" => UnaryOp::Relu,
            "LeakyRelu" => UnaryOp::LeakyRelu {
                alpha: f("alpha", 0.01)?,
            },
            "Elu" => UnaryOp::Elu {
                alpha: f("alpha", 1.0)?,
            },
            "Selu" => UnaryOp::Selu {
                alpha: f("alpha", SELU_ALPHA)?,
                gamma: f("gamma", SELU_GAMMA)?,
            },
            "Celu" => UnaryOp::Celu {
                alpha: f("alpha", 1.0)?,
            },
            "HardSigmoid" => UnaryOp::HardSigmoid {
                alpha: f("alpha", 0.2)?,
                beta: f("beta", 0.5)?,
            },
            "HardSwish" => UnaryOp::HardSwish,
            "Softplus" => UnaryOp::Softplus,
            "Softsign" => UnaryOp::Softsign,
            "Gelu" => match ctx.attr_s("approximate", "none")?.as_str() {
                "none" => UnaryOp::Gelu { tanh: false },
                "tanh" => UnaryOp::Gelu { tanh: true },
                other => {
                    return Err(OpError::Invalid(format!(
                        "Gelu approximate='{other}' is not an ONNX mode"
                    )));
                }
            },
            "Mish" => UnaryOp::Mish,
            "ThresholdedRelu" => UnaryOp::ThresholdedRelu {
                alpha: f("alpha", 1.0)?,
            },
            _ => return Ok(None),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Node};
    use crate::ops::NoSubgraphs;

    fn parse(op: &str, attrs: &[(&str, Attr)]) -> OpResult<Option<UnaryOp>> {
        let node = Node {
            name: "n".into(),
            op_type: op.into(),
            domain: String::new(),
            opset: 20,
            inputs: vec![],
            outputs: vec![],
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        let ctx = OpCtx {
            node: &node,
            runner: &NoSubgraphs,
            max_tensor_bytes: 1 << 30,
        };
        UnaryOp::parse(&ctx)
    }

    /// Every unary row of the op table that is a value map has a descriptor, and no other row does.
    #[test]
    fn every_value_map_row_parses() {
        let own = ["Clip", "Not", "IsNaN", "IsInf"];
        for row in quorum_optable::rows_of(quorum_optable::Family::Unary) {
            let parsed = parse(row.name, &[]).unwrap();
            assert_eq!(parsed.is_some(), !own.contains(&row.name), "{}", row.name);
        }
        assert_eq!(parse("Add", &[]).unwrap(), None);
    }

    #[test]
    fn defaults_and_attributes() {
        assert_eq!(
            parse("Selu", &[]).unwrap(),
            Some(UnaryOp::Selu {
                alpha: SELU_ALPHA,
                gamma: SELU_GAMMA
            })
        );
        assert_eq!(
            parse("HardSigmoid", &[("beta", Attr::Float(0.25))]).unwrap(),
            Some(UnaryOp::HardSigmoid {
                alpha: 0.2,
                beta: 0.25
            })
        );
        let tanh = Attr::String(b"tanh".to_vec());
        assert_eq!(
            parse("Gelu", &[("approximate", tanh)]).unwrap(),
            Some(UnaryOp::Gelu { tanh: true })
        );
        let bad = Attr::String(b"erf".to_vec());
        assert!(parse("Gelu", &[("approximate", bad)]).is_err());
        assert!(parse("Elu", &[("alpha", Attr::String(b"1".to_vec()))]).is_err());
    }
}
