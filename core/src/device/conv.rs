//! The convolution family's host-side plan, decided once for every backend: the group, the channel
//! counts checked against it, the bias length, the geometry (the CPU kernel's own, from
//! `ops::conv`) and the output shape. A backend's Conv or ConvTranspose kernel asks [`conv_plan`] or
//! [`convt_plan`] and launches by what it gets.
use crate::error::OpError;
use crate::ops::OpCtx;
use crate::ops::conv::{Geom, conv_geom, convt_geom};

/// A convolution's shapes, checked: `group` groups, batch `n`, `c` input and `m` output channels
/// (`cg` and `mg` per group), the geometry, and the output shape.
#[derive(Debug, Clone)]
pub struct ConvPlan {
    pub group: usize,
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub cg: usize,
    pub mg: usize,
    pub g: Geom,
    pub out_shape: Vec<usize>,
}

/// Conv's plan for X of shape `xs` and W of shape `ws` (both of rank 3 or more), with a bias of
/// `bias_len` elements if given.
pub fn conv_plan(
    ctx: &OpCtx,
    xs: &[usize],
    ws: &[usize],
    bias_len: Option<usize>,
) -> Result<ConvPlan, OpError> {
    let group = conv_group(ctx)?;
    let (n, c, m) = conv_channels(xs, ws, group)?;
    conv_bias(bias_len, m)?;
    let g = conv_geom(ctx, &xs[2..], &ws[2..])?;
    let out_shape = conv_out_shape(n, m, &g.outs, xs.len() - 2);
    Ok(ConvPlan {
        group,
        n,
        c,
        m,
        cg: c / group,
        mg: m / group,
        g,
        out_shape,
    })
}

/// ConvTranspose's plan for X of shape `xs` and W of shape `ws` (both of rank 3 or more), with a
/// bias of `bias_len` elements if given.
pub fn convt_plan(
    ctx: &OpCtx,
    xs: &[usize],
    ws: &[usize],
    bias_len: Option<usize>,
) -> Result<ConvPlan, OpError> {
    let group = conv_group(ctx)?;
    let (n, c, mg) = convt_channels(xs, ws, group)?;
    let m = mg * group;
    conv_bias(bias_len, m)?;
    let g = convt_geom(ctx, &xs[2..], &ws[2..])?;
    let out_shape = conv_out_shape(n, m, &g.outs, xs.len() - 2);
    Ok(ConvPlan {
        group,
        n,
        c,
        m,
        cg: c / group,
        mg,
        g,
        out_shape,
    })
}

/// Conv's and ConvTranspose's `group`.
fn conv_group(ctx: &OpCtx) -> Result<usize, OpError> {
    let group = ctx.attr_i("group", 1)?;
    if group < 1 {
        return Err(OpError::Invalid(format!("group must be >= 1, got {group}")));
    }
    Ok(group as usize)
}

/// A convolution's bias (`bias_len` elements, if given) against its `m` output channels.
fn conv_bias(bias_len: Option<usize>, m: usize) -> Result<(), OpError> {
    match bias_len {
        Some(len) if len != m => Err(OpError::Invalid(format!(
            "bias has {len} elements, expected {m}"
        ))),
        _ => Ok(()),
    }
}

/// A convolution's output shape: batch `n`, `m` channels, and the last `rank` of the geometry's
/// three spatial output sizes (`outs`, leading ones padded for lower ranks).
fn conv_out_shape(n: usize, m: usize, outs: &[usize; 3], rank: usize) -> Vec<usize> {
    let mut s = vec![n, m];
    s.extend_from_slice(&outs[3 - rank..]);
    s
}

/// Conv's batch `n`, input channels `c` and output channels `m`, checked against the group.
fn conv_channels(
    xs: &[usize],
    ws: &[usize],
    group: usize,
) -> Result<(usize, usize, usize), OpError> {
    let (n, c, m) = (xs[0], xs[1], ws[0]);
    if ws[1].checked_mul(group) != Some(c) || m % group != 0 {
        return Err(OpError::Invalid(format!(
            "Conv channels mismatch: X {xs:?}, W {ws:?}, group {group}"
        )));
    }
    Ok((n, c, m))
}

/// ConvTranspose's batch `n`, input channels `c` and output channels per group, checked against
/// the group.
fn convt_channels(
    xs: &[usize],
    ws: &[usize],
    group: usize,
) -> Result<(usize, usize, usize), OpError> {
    let (n, c) = (xs[0], xs[1]);
    if ws[0] != c || c % group != 0 {
        return Err(OpError::Invalid(format!(
            "ConvTranspose channels mismatch: X {xs:?}, W {ws:?}, group {group}"
        )));
    }
    Ok((n, c, ws[1]))
}
