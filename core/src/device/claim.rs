//! Which kernel a device backend launches for a node, decided once for every backend: the op table
//! (`quorum_optable`) says whether the backend claims the op and which family's code generator
//! handles it; the backend's generator for that family claims the node's form or declines it.
//!
//! Architecture invariant: a backend lists no ops. It implements [`CodeGenerators`], one method per
//! device family of the table (a new family is a compile error in every backend until each has its
//! generator), and the table's rows decide the rest.
use quorum_optable::{Backend, Family};

use crate::ir::Node;

/// What a family's generator answers for a node: `None` for an op it does not know (the table and
/// the backend have drifted apart: the claim says so, and `runtime/tests/op_table.rs` fails), else
/// the kernel or the reason it declines the node's form.
pub type FamilyClaim<K> = Option<Result<K, String>>;

/// A backend's code generators, one per device family of the op table.
pub trait CodeGenerators {
    /// The backend's kernel: what its claim hands to the executor.
    type Kernel;
    /// The backend's column in the op table.
    const BACKEND: Backend;
    /// How claims name the backend's kernels ("no CUDA kernel for this operator").
    const NAME: &'static str;

    /// Unary and binary elementwise ops.
    fn elementwise(node: &Node) -> FamilyClaim<Self::Kernel>;
    fn cast(node: &Node) -> FamilyClaim<Self::Kernel>;
    /// Movement, views and fills.
    fn movement(node: &Node) -> FamilyClaim<Self::Kernel>;
    fn index(node: &Node) -> FamilyClaim<Self::Kernel>;
    fn resize(node: &Node) -> FamilyClaim<Self::Kernel>;
    fn matrix(node: &Node) -> FamilyClaim<Self::Kernel>;
    fn convolution(node: &Node) -> FamilyClaim<Self::Kernel>;
    fn reduction(node: &Node) -> FamilyClaim<Self::Kernel>;
    fn softmax(node: &Node) -> FamilyClaim<Self::Kernel>;
    fn normalization(node: &Node) -> FamilyClaim<Self::Kernel>;
    fn pooling(node: &Node) -> FamilyClaim<Self::Kernel>;
    /// LSTM and GRU (only where the op table gives the backend the row).
    fn recurrent(node: &Node) -> FamilyClaim<Self::Kernel>;
}

/// The kernel backend `G` launches for a default-domain `node`, or why it declines the node.
pub fn claim<G: CodeGenerators>(node: &Node) -> Result<G::Kernel, String> {
    if !node.domain.is_empty() {
        return Err(format!(
            "domain '{}' has no {} kernels",
            node.domain,
            G::NAME
        ));
    }
    let Some(row) = quorum_optable::find(&node.op_type).filter(|r| r.devices.contains(G::BACKEND))
    else {
        return Err(format!("no {} kernel for this operator", G::NAME));
    };
    let claimed = match row.family {
        Family::Unary | Family::Binary => G::elementwise(node),
        Family::Cast => G::cast(node),
        Family::Movement | Family::View | Family::Fill => G::movement(node),
        Family::Index => G::index(node),
        Family::Resize => G::resize(node),
        Family::Matrix => G::matrix(node),
        Family::Convolution => G::convolution(node),
        Family::Reduction => G::reduction(node),
        Family::Softmax => G::softmax(node),
        Family::Normalization => G::normalization(node),
        Family::Pooling => G::pooling(node),
        Family::Recurrent => G::recurrent(node),
        Family::Metadata => {
            return Err(format!("the {:?} family runs on the host", row.family));
        }
    };
    claimed.unwrap_or_else(|| {
        Err(format!(
            "the op table puts {} in the {:?} family, whose {} kernels do not know it",
            node.op_type,
            row.family,
            G::NAME
        ))
    })
}

/// Every op type backend `G` claims in at least one form, sorted (for `quorum info` and the docs).
pub fn claimed_ops<G: CodeGenerators>() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = quorum_optable::device_ops(G::BACKEND).collect();
    v.sort();
    v
}
